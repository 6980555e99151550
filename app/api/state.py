"""Access to the lifespan's runtime from a request."""

from __future__ import annotations

from starlette.requests import Request

from app.services.runtime import Runtime


def runtime(request: Request) -> Runtime:
    state: Runtime = request.app.state.runtime
    return state
