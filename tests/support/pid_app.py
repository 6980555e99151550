"""The smallest application a worker test needs: it answers with the serving process's pid,
which tells which worker accepted a connection."""

from __future__ import annotations

import os

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route


async def pid(_: Request) -> PlainTextResponse:
    return PlainTextResponse(str(os.getpid()))


def create_app() -> Starlette:
    return Starlette(routes=[Route("/", pid)])
