"""A gateway runtime for a test that drives services directly, closed after it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from app.config.settings import Settings
from app.gateway.main import build_runtime
from app.gateway.runtime import Runtime


@asynccontextmanager
async def runtime_of(settings: Settings) -> AsyncIterator[Runtime]:
    """build_runtime(settings); its HTTP client and database pool closed when done."""
    rt = build_runtime(settings)
    try:
        yield rt
    finally:
        await rt.http.aclose()
        await rt.db.dispose()
