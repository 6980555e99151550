"""GET /openapi.json: the document, encoded once per process."""

from __future__ import annotations

import functools
import json

from starlette.requests import Request
from starlette.responses import Response

from app.api.state import runtime
from app.openapi.document import document


@functools.cache
def _encoded(max_content_chars: int) -> bytes:
    return json.dumps(document(max_content_chars=max_content_chars),
                      ensure_ascii=False, separators=(",", ":")).encode()


async def openapi_json(request: Request) -> Response:
    return Response(_encoded(runtime(request).settings.max_content_chars),
                    media_type="application/json")
