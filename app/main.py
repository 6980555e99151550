"""The Starlette application factory (the gateway issue fills in the routes)."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


async def healthz(_: Request) -> JSONResponse:
    """Process is up; says nothing about the database (that is /readyz)."""
    return JSONResponse({"status": "ok"})


def create_app() -> Starlette:
    """Build the gateway application."""
    return Starlette(routes=[Route("/healthz", healthz)])
