"""GET /metrics: Prometheus text format. Unauthenticated, like /healthz: it carries no user
data (labels are statuses, warning kinds, models, error codes); restrict it at the load
balancer when the gateway is public (docs/production.md)."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from app.api.state import runtime
from app.observe.metrics import CONTENT_TYPE


async def metrics(request: Request) -> Response:
    # In multiprocess mode the exposition reads every worker's files: off the event loop.
    body = await run_in_threadpool(runtime(request).metrics.exposition)
    return Response(body, media_type=CONTENT_TYPE)
