"""Who is calling: `Authorization: Bearer <key>` looked up in the store, or, with auth mode
`off` (loopback development), everyone is user `local`."""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from starlette.requests import Request

from app.api.errors import ApiError
from app.api.state import runtime
from app.store import api_keys

LOCAL_USER = "local"


@dataclass(frozen=True)
class Principal:
    user_id: str
    is_admin: bool


def _bearer_token(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "unauthorized", "missing API key: send 'Authorization: Bearer <key>'")
    return token.strip()


async def authenticate(request: Request) -> Principal:
    """The caller, bound into the log context; 401 for a missing, wrong or revoked key
    (one message for all three: the answer must not help guessing)."""
    rt = runtime(request)
    if rt.settings.auth_mode == "off":
        principal = Principal(LOCAL_USER, is_admin=True)
    else:
        token = _bearer_token(request)
        async with rt.db.transaction() as session:
            key = await api_keys.authenticate(session, token)
            found = Principal(key.user_id, key.is_admin) if key is not None else None
        if found is None:
            raise ApiError(401, "unauthorized", "invalid or revoked API key")
        principal = found
    structlog.contextvars.bind_contextvars(user_id=principal.user_id)
    return principal
