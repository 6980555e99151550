"""Who is calling: `Authorization: Bearer <key>` (or, on the Anthropic Messages API, whose
clients send it so, `x-api-key: <key>`) looked up by app.keys.service, or, with auth mode
`off` (loopback development), everyone is user `local`."""

from __future__ import annotations

import structlog
from starlette.requests import Request

from app.api.errors import ApiError
from app.api.state import runtime
from app.keys.service import Principal, authenticate_key

LOCAL_USER = "local"


def _bearer_token(request: Request, *, x_api_key: bool) -> str:
    if x_api_key and (key := request.headers.get("x-api-key", "").strip()):
        return key
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        also = "'x-api-key: <key>' or " if x_api_key else ""
        raise ApiError(401, "unauthorized", f"missing API key: send {also}'Authorization: "
                                            "Bearer <key>'")
    return token.strip()


async def authenticate(request: Request, *, x_api_key: bool = False) -> Principal:
    """The caller, bound into the log context; 401 for a missing, wrong or revoked key
    (one message for all three: the answer must not help guessing). `x_api_key`: the key
    may come as `x-api-key` too (the Anthropic SDKs' header), which then goes first."""
    rt = runtime(request)
    if rt.settings.auth_mode == "off":
        principal = Principal(LOCAL_USER, is_admin=True)
    else:
        found = await authenticate_key(rt.db, _bearer_token(request, x_api_key=x_api_key))
        if found is None:
            raise ApiError(401, "unauthorized", "invalid or revoked API key")
        principal = found
    structlog.contextvars.bind_contextvars(user_id=principal.user_id)
    return principal
