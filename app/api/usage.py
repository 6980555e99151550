"""Usage routes: the caller's own usage, and any user's for admin keys.

    GET /api/usage?start=YYYY-MM-DD&end=YYYY-MM-DD&group_by=day|model
    GET /api/admin/usage?user_id=...&start=...&end=...&group_by=day|model   (admin keys only)

Days are UTC days, both ends included; the default is the 30 days ending today. The answer:
`{user_id, start, end, group_by, totals, rows, messages}` where totals and rows come from the
daily rollup (every upstream call) and `messages` from get_user_token_usage (the assistant
messages created in the range). See docs/usage.md for what each figure means.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from app.api.auth import authenticate
from app.api.errors import ApiError
from app.api.state import runtime
from app.services.recorder import iso_utc
from app.store import usage_reports
from app.store.usage_reports import GroupBy, MessageUsage, UsageReport

DEFAULT_DAYS = 30
MAX_DAYS = 366
GROUP_BY_CHOICES = ("day", "model")
MAX_USER_ID_CHARS = 255
DAY_PATTERN = re.compile(r"\d{4}-\d{2}-\d{2}")


def _day_param(request: Request, name: str, default: dt.date) -> dt.date:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        if DAY_PATTERN.fullmatch(raw):
            return dt.date.fromisoformat(raw)
    except ValueError:
        pass
    raise ApiError(422, "invalid_query", f"'{name}' must be a day as YYYY-MM-DD, got {raw!r}")


def _date_range(request: Request) -> tuple[dt.date, dt.date]:
    """`start`/`end` (inclusive UTC days): 422 when malformed, reversed or over a year."""
    today = dt.datetime.now(dt.UTC).date()
    end = _day_param(request, "end", today)
    if end == dt.date.max:  # the query's bound is the day after `end`, which must exist
        raise ApiError(422, "invalid_query", f"'end' must be before {dt.date.max.isoformat()}")
    # Clamped at the first day there is: `end=0001-01-05` must be a 422 or a report, not a 500.
    default_start = dt.date.fromordinal(max(1, end.toordinal() - (DEFAULT_DAYS - 1)))
    start = _day_param(request, "start", default_start)
    if start > end:
        raise ApiError(422, "invalid_query", "'start' must not be after 'end'")
    if (end - start).days + 1 > MAX_DAYS:
        raise ApiError(422, "invalid_query", f"the range may span at most {MAX_DAYS} days")
    return start, end


def _group_by(request: Request) -> GroupBy:
    value = request.query_params.get("group_by") or "day"
    if value not in GROUP_BY_CHOICES:
        raise ApiError(422, "invalid_query", "'group_by' must be 'day' or 'model'")
    return cast(GroupBy, value)


def _user_id(request: Request) -> str:
    value = request.query_params.get("user_id", "")
    if not value.strip() or len(value) > MAX_USER_ID_CHARS:
        raise ApiError(422, "invalid_query",
                       f"'user_id' is required (1 to {MAX_USER_ID_CHARS} characters)")
    return value


def _messages_json(usage: MessageUsage) -> dict[str, Any]:
    return {
        "total_tokens": usage.total_tokens,
        "message_count": usage.message_count,
        "conversation_count": usage.conversation_count,
        "first_message": iso_utc(usage.first_message) if usage.first_message else None,
        "last_message": iso_utc(usage.last_message) if usage.last_message else None,
    }


def _report_json(report: UsageReport, messages: MessageUsage) -> dict[str, Any]:
    key = report.group_by
    return {
        "user_id": report.user_id,
        "start": report.start.isoformat(),
        "end": report.end.isoformat(),
        "group_by": key,
        "totals": report.totals.as_dict(),
        "rows": [{key: name, **figures.as_dict()} for name, figures in report.rows.items()],
        "messages": _messages_json(messages),
    }


async def _usage_json(request: Request, user_id: str) -> dict[str, Any]:
    start, end = _date_range(request)
    group_by = _group_by(request)
    async with runtime(request).db.transaction() as session:
        report = await usage_reports.usage_report(session, user_id, start, end, group_by)
        messages = await usage_reports.get_user_token_usage(
            session, user_id, usage_reports.day_start(start),
            usage_reports.day_start(end + dt.timedelta(days=1)),
        )
    return _report_json(report, messages)


async def my_usage(request: Request) -> JSONResponse:
    principal = await authenticate(request)
    return JSONResponse(await _usage_json(request, principal.user_id))


async def admin_usage(request: Request) -> JSONResponse:
    principal = await authenticate(request)
    if not principal.is_admin:
        raise ApiError(403, "forbidden", "an admin API key is required")
    return JSONResponse(await _usage_json(request, _user_id(request)))


def usage_routes() -> list[BaseRoute]:
    return [
        Route("/api/usage", my_usage, methods=["GET"]),
        Route("/api/admin/usage", admin_usage, methods=["GET"]),
    ]
