"""The single-page web UI: `GET /` and `/static/...` (plain HTML + JS + CSS, no build step)."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).parent / "static"

#: Everything comes from this origin and no inline script runs: model output that somehow
#: reached the DOM as markup still could not execute.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)


async def index(_: Request) -> FileResponse:
    """The page itself; never cached, so a deploy is picked up on reload."""
    return FileResponse(
        STATIC_DIR / "index.html",
        media_type="text/html; charset=utf-8",
        headers={"Cache-Control": "no-cache", "Content-Security-Policy": CONTENT_SECURITY_POLICY,
                 "X-Content-Type-Options": "nosniff"},
    )


def web_routes() -> list[BaseRoute]:
    """Routes for the gateway app: the page at `/`, its assets under `/static`."""
    return [
        Route("/", index, methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
    ]
