"""The web UI: the chat page at `GET /`, the admin usage dashboard at `GET /admin`, and their
files under `/static/...` (plain HTML + JS + CSS, no build step)."""

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


def _page(path: Path) -> FileResponse:
    """A page; never cached, so a deploy is picked up on reload."""
    return FileResponse(
        path,
        media_type="text/html; charset=utf-8",
        headers={"Cache-Control": "no-cache", "Content-Security-Policy": CONTENT_SECURITY_POLICY,
                 "X-Content-Type-Options": "nosniff"},
    )


async def index(_: Request) -> FileResponse:
    return _page(STATIC_DIR / "index.html")


async def admin(_: Request) -> FileResponse:
    """The usage dashboard. The page itself is public like `/`: the figures come from the
    admin API, which asks for an admin key."""
    return _page(STATIC_DIR / "admin" / "index.html")


def web_routes() -> list[BaseRoute]:
    """Routes for the gateway app: the pages at `/` and `/admin`, their assets under
    `/static`."""
    return [
        Route("/", index, methods=["GET"]),
        Route("/admin", admin, methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
    ]
