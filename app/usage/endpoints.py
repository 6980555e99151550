"""Usage routes: the caller's own usage, and any user's for admin keys.

    GET /api/usage?start=YYYY-MM-DD&end=YYYY-MM-DD&group_by=day|model
    GET /api/admin/usage?user_id=...&start=...&end=...&group_by=day|model   (admin keys only)
    GET /api/admin/usage/report?start=&end=&group_by=day|user|model|stage[,second]
        &limit=&offset=&user_id=...&format=json|csv   every user's usage (or the users named),
                                                 grouped and paged (admin keys)
    GET /api/admin/refusals?start=&end=&format=json|csv   refused turns per day and reason

The handlers parse the query string into typed values, call app.usage.reports
(which owns the range rules and the answer's shape) and render its answer; a refused query
is a 422 with the service's error code.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Awaitable, Callable
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from app.api.auth import authenticate
from app.api.errors import ApiError
from app.api.state import runtime
from app.usage import admin_reports
from app.usage import reports as usage_reports
from app.usage.admin_reports import AdminUsageQuery
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


async def _checked(read: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """The service's answer; a query its rules refuse is a 422 with its code."""
    try:
        return await read()
    except InvalidUsageQuery as exc:
        raise ApiError(422, exc.code, exc.message) from exc


async def my_usage(request: Request) -> JSONResponse:
    principal = await authenticate(request)
    query = _query(request)
    return JSONResponse(await _checked(lambda: usage_reports.usage_for(
        runtime(request).db, principal.user_id, query)))


async def _admin(request: Request) -> None:
    principal = await authenticate(request)
    if not principal.is_admin:
        raise ApiError(403, "forbidden", "an admin API key is required")


async def admin_usage(request: Request) -> JSONResponse:
    await _admin(request)
    query = _query(request)
    return JSONResponse(await _checked(lambda: usage_reports.usage_of_user(
        runtime(request).db, request.query_params.get("user_id"), query)))


def _int_param(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if not re.fullmatch(r"-?\d{1,9}", raw):
        raise ApiError(422, "invalid_query", f"'{name}' must be a whole number, got {raw!r}")
    return int(raw)


def _wants_csv(request: Request) -> bool:
    value = request.query_params.get("format") or "json"
    if value not in ("json", "csv"):
        raise ApiError(422, "invalid_query", "'format' must be 'json' or 'csv'")
    return value == "csv"


async def _admin_report(
    request: Request, read: Callable[[bool], Awaitable[dict[str, Any]]],
    as_csv_text: Callable[[dict[str, Any]], str], file_name: Callable[[dict[str, Any]], str],
) -> Response:
    """An admin report, `read(as_csv)`: as a CSV file when `format=csv`, else JSON."""
    await _admin(request)
    as_csv = _wants_csv(request)
    answer = await _checked(lambda: read(as_csv))
    if not as_csv:
        return JSONResponse(answer)
    return Response(as_csv_text(answer), media_type="text/csv; charset=utf-8", headers={
        "Content-Disposition": f'attachment; filename="{file_name(answer)}.csv"'})


async def admin_usage_report(request: Request) -> Response:
    """Every user's usage; as CSV every row of the range (no page)."""
    async def read(as_csv: bool) -> dict[str, Any]:
        limit, offset = admin_reports.page_bounds(_int_param(request, "limit"),
                                                  _int_param(request, "offset"))
        query = AdminUsageQuery(_day_param(request, "start"), _day_param(request, "end"),
                                admin_reports.group_keys(request.query_params.get("group_by")),
                                None if as_csv else limit, 0 if as_csv else offset,
                                admin_reports.chosen_users(
                                    request.query_params.getlist("user_id")),
                                admin_reports.model_names(
                                    runtime(request).turn_deps.models.catalog.models))
        return await admin_reports.usage_report(runtime(request).db, query)

    return await _admin_report(
        request, read, admin_reports.usage_csv,
        lambda answer: f"usage-{'-'.join(answer['group_by'])}-{answer['start']}-{answer['end']}")


async def admin_refusals(request: Request) -> Response:
    async def read(_: bool) -> dict[str, Any]:
        return await admin_reports.refusal_report(
            runtime(request).db, _day_param(request, "start"), _day_param(request, "end"))

    return await _admin_report(request, read, admin_reports.refusals_csv,
                               lambda answer: f"refusals-{answer['start']}-{answer['end']}")


def usage_routes() -> list[BaseRoute]:
    return [
        Route("/api/usage", my_usage, methods=["GET"]),
        Route("/api/admin/usage", admin_usage, methods=["GET"]),
        Route("/api/admin/usage/report", admin_usage_report, methods=["GET"]),
        Route("/api/admin/refusals", admin_refusals, methods=["GET"]),
    ]
