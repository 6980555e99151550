"""Usage routes: the caller's own usage, and any user's for admin keys.

    GET /api/usage?start=YYYY-MM-DD&end=YYYY-MM-DD&group_by=day|model
    GET /api/admin/usage?user_id=...&start=...&end=...&group_by=day|model   (admin keys only)

The handlers parse the query string into typed values, call app.usage.reports
(which owns the range rules and the answer's shape) and render its answer; a refused query
is a 422 with the service's error code.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Awaitable
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from app.api.auth import authenticate
from app.api.errors import ApiError
from app.api.state import runtime
from app.usage import reports as usage_reports
from app.usage.reports import GroupBy, InvalidUsageQuery, UsageQuery

GROUP_BY_CHOICES = ("day", "model")
DAY_PATTERN = re.compile(r"\d{4}-\d{2}-\d{2}")


def _day_param(request: Request, name: str) -> dt.date | None:
    """A `YYYY-MM-DD` day, None when absent or empty (the service picks the default)."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    try:
        if DAY_PATTERN.fullmatch(raw):
            return dt.date.fromisoformat(raw)
    except ValueError:
        pass
    raise ApiError(422, "invalid_query", f"'{name}' must be a day as YYYY-MM-DD, got {raw!r}")


def _group_by(request: Request) -> GroupBy:
    value = request.query_params.get("group_by") or "day"
    if value not in GROUP_BY_CHOICES:
        raise ApiError(422, "invalid_query", "'group_by' must be 'day' or 'model'")
    return cast(GroupBy, value)


def _query(request: Request) -> UsageQuery:
    return UsageQuery(_day_param(request, "start"), _day_param(request, "end"),
                      _group_by(request))


async def _render(answer: Awaitable[dict[str, Any]]) -> JSONResponse:
    """The service's answer as JSON; a query its rules refuse as a 422 with its code."""
    try:
        return JSONResponse(await answer)
    except InvalidUsageQuery as exc:
        raise ApiError(422, exc.code, exc.message) from exc


async def my_usage(request: Request) -> JSONResponse:
    principal = await authenticate(request)
    query = _query(request)
    return await _render(usage_reports.usage_for(runtime(request).db, principal.user_id, query))


async def admin_usage(request: Request) -> JSONResponse:
    principal = await authenticate(request)
    if not principal.is_admin:
        raise ApiError(403, "forbidden", "an admin API key is required")
    query = _query(request)
    return await _render(usage_reports.usage_of_user(
        runtime(request).db, request.query_params.get("user_id"), query))


def usage_routes() -> list[BaseRoute]:
    return [
        Route("/api/usage", my_usage, methods=["GET"]),
        Route("/api/admin/usage", admin_usage, methods=["GET"]),
    ]
