"""Thread routes: create, list, history, delete. Parse, authorise, call a service."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.api import bodies
from app.api.auth import authenticate
from app.api.errors import ApiError, not_found
from app.api.state import runtime
from app.threads import service as threads


async def create_thread(request: Request) -> JSONResponse:
    principal = await authenticate(request)
    body = await bodies.json_object(request, optional=True)
    title = bodies.optional_title(body)
    created = await threads.create_thread(runtime(request).db, principal.user_id, title)
    return JSONResponse(created, status_code=201)


#: Longest search text (a search box, not a document).
MAX_QUERY_CHARS = 200


async def list_threads(request: Request) -> JSONResponse:
    """GET /api/threads[?q=words][&origin=chat|responses|all]: the user's chats (the page's
    list; `origin` names another kind, or all), or those matching the words."""
    principal = await authenticate(request)
    origin = request.query_params.get("origin", "chat")
    if origin not in threads.LIST_ORIGINS:
        raise ApiError(422, "invalid_query",
                       f"'origin' must be one of {', '.join(threads.LIST_ORIGINS)}")
    query = request.query_params.get("q", "")
    if len(query) > MAX_QUERY_CHARS:
        raise ApiError(422, "invalid_query",
                       f"'q' is {len(query)} characters; the limit is {MAX_QUERY_CHARS}")
    if bodies.NUL in query:
        raise ApiError(422, "invalid_query", bodies.NUL_REFUSED.format(field="'q'"))
    rows = await threads.list_threads(runtime(request).db, principal.user_id, query,
                                      None if origin == "all" else origin)
    return JSONResponse({"threads": rows})


async def thread_messages(request: Request) -> JSONResponse:
    principal = await authenticate(request)
    thread_id = bodies.thread_id(request)
    rows = await threads.thread_messages(
        runtime(request).db, principal.user_id, thread_id,
        include_synthetic=bodies.flag(request, "include_synthetic"),
        whole_tree=bodies.flag(request, "tree"),
    )
    if rows is None:
        raise not_found()
    return JSONResponse({"messages": rows})


async def delete_thread(request: Request) -> Response:
    principal = await authenticate(request)
    thread_id = bodies.thread_id(request)
    if not await threads.delete_thread(runtime(request).db, principal.user_id, thread_id):
        raise not_found()
    return Response(status_code=204)
