"""Access to the lifespan's runtime from a request."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request

if TYPE_CHECKING:  # a handler names the runtime's type; it depends on no part of it
    from app.gateway.runtime import Runtime


def runtime(request: Request) -> Runtime:
    state: Runtime = request.app.state.runtime
    return state
