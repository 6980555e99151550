"""Fixtures of the SQLite driver's tests: the trips to a connection's thread, and the event
loop's passes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.store.sqlite_driver import OneTripConnection
from tests.support.loop_passes import LoopPasses


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of each function sent to a connection's thread."""
    sent: list[str] = []
    original = OneTripConnection._execute

    async def counted(self: OneTripConnection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(getattr(fn, "__name__", repr(fn)))
        return await original(self, fn, *args, **kwargs)

    monkeypatch.setattr(OneTripConnection, "_execute", counted)
    return sent


@pytest.fixture
async def passes() -> AsyncIterator[LoopPasses]:
    counter = LoopPasses()
    task = asyncio.create_task(counter.run())
    await asyncio.sleep(0)
    yield counter
    task.cancel()
