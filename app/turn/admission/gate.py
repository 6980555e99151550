"""Turn limits: one user must not starve everyone else of the gateway.

A turn request passes, in this order, before anything is stored or sent upstream:

1. the rate limit: `rate_limit_per_minute` turn requests per user in a fixed minute window,
   counted in the database (one atomic upsert) or in Redis, shared by every process; a
   refused request is not counted -> 429 `rate_limited`;
2. an upstream slot of this process (app.turn.holds.slots) -> 503 `gateway_busy`;
3. in the turn's opening (app.turn.rows), which stores its rows only under both: the
   key's daily budget (tokens, cost) against the user's rollup of the UTC day -> 429
   `budget_exceeded`; then, serialised per user (a PostgreSQL advisory lock held to the
   commit; SQLite's BEGIN IMMEDIATE), the user's other streams, every process and thread
   together, against `max_streams_per_user` -> 429 `too_many_streams`. A user's streams are
   their `streaming` answers and their open calls (a call without a thread stores no message:
   its `open_calls` row, stored by the same check, app.turn.rows.open_call). A refusal
   stores nothing.

A turn let in under a token budget may spend what the budget has left: its answer's
`max_tokens` is lowered to it (app.turn.holds.allowance), so the budget is overshot by
at most the turn's prompt (and its title and summary calls), not by a whole answer.

Follow-up turns (app.followups.worker) do not come through here: they are the gateway's own,
a few per process at most, and a user's cap or budget must not lose them; their streaming
rows still count against the user's cap for the user's own requests. They do take an upstream
slot, and retry later like a busy thread when none is free.

Every refusal is one log line (user id, code), one `chatgate_refusals_total{reason}` and one
count of its UTC day and reason for the admin dashboard (app.usage.refusals, when given)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

from app.core.clock import Clock, utcnow
from app.keys.rate_windows import RateWindows
from app.keys.service import Principal
from app.observe.logging import get_logger
from app.observe.metrics import GatewayMetrics
from app.store.errors import DatabaseBusy
from app.turn.deps import TurnDeps
from app.turn.holds.allowance import token_allowance
from app.turn.holds.slots import GatewayBusy, TurnRefused
from app.turn.rows import DayBudget, Refused
from app.usage.refusals import RefusalTally
from app.usage.repository import usage_of_day

log = get_logger("services.limits")

T = TypeVar("T")

RATE_WINDOW = dt.timedelta(minutes=1)
#: When to try again at the stream cap: no one knows when a stream ends; answers take seconds.
TOO_MANY_STREAMS_RETRY_S = 5.0


def too_many_streams(limit: int) -> TurnRefused:
    return TurnRefused(
        429, "too_many_streams",
        f"you already have {limit} answers streaming; wait until one of them has finished",
        TOO_MANY_STREAMS_RETRY_S)


def rate_limited(limit: int, retry_after_s: float) -> TurnRefused:
    return TurnRefused(
        429, "rate_limited",
        f"more than {limit} messages in one minute; wait a moment before sending the next",
        retry_after_s)


def budget_exceeded(retry_after_s: float) -> TurnRefused:
    return TurnRefused(
        429, "budget_exceeded",
        "this key has used up its daily budget; it is renewed at midnight UTC", retry_after_s)


def window_start(now: dt.datetime) -> dt.datetime:
    """The start of the fixed rate-limit window (the UTC minute) holding `now`."""
    return now.astimezone(dt.UTC).replace(second=0, microsecond=0)


def seconds_to_next_day(now: dt.datetime) -> float:
    """Seconds from `now` to the next midnight UTC, when a daily budget is renewed."""
    utc = now.astimezone(dt.UTC)
    midnight = dt.datetime.combine(utc.date() + dt.timedelta(days=1), dt.time(), dt.UTC)
    return (midnight - utc).total_seconds()


def has_budget(principal: Principal) -> bool:
    """The key has a daily budget of tokens or cost."""
    return (principal.daily_token_budget is not None
            or principal.daily_cost_budget_usd is not None)


class TurnGate:
    """Opens a user's turn through the limits (the one service the turn handler calls)."""

    def __init__(self, deps: TurnDeps, metrics: GatewayMetrics, windows: RateWindows, *,
                 clock: Clock = utcnow, refusals: RefusalTally | None = None) -> None:
        self.deps = deps
        self.metrics = metrics
        self.refusals = refusals
        self.windows = windows
        self.clock = clock
        self.max_streams = deps.settings.max_streams_per_user
        self.per_minute = deps.settings.rate_limit_per_minute

    async def admit(self, principal: Principal, opener: Callable[[], Awaitable[T]]) -> T:
        """`opener` once the rate limit let the request in; a TurnRefused it raises (a busy
        gateway, a guard's refusal) is counted and logged like the rate limit's."""
        try:
            try:
                await self._count_request(principal.user_id)
                with token_allowance(await self._tokens_left(principal)):
                    return await opener()
            except DatabaseBusy as busy:  # all connections in use: an overload, not an outage
                raise GatewayBusy(self.deps.settings.database_retry_after_s) from busy
        except TurnRefused as refused:
            self.metrics.refusals.labels(reason=refused.code).inc()
            if self.refusals is not None:
                self.refusals.count(refused.code)
            log.warning("turn_refused", code=refused.code, user_id=principal.user_id,
                        retry_after_s=refused.retry_after_s)
            raise

    async def _tokens_left(self, principal: Principal) -> int | None:
        """What the key's daily token budget has left (None: no token budget): the most
        tokens the admitted turn's answer may run to, so the budget is overshot by at most
        the turn's prompt. Read before the opening, which checks the budget again under
        the user's lock (turns admitted at the same moment may each get the same rest)."""
        budget = principal.daily_token_budget
        if budget is None:
            return None
        async with self.deps.db.transaction(read_only=True) as session:
            spent, _ = await usage_of_day(session, principal.user_id,
                                          self.clock().astimezone(dt.UTC).date())
        return max(1, budget - spent)

    async def _count_request(self, user_id: str) -> None:
        if self.per_minute <= 0:
            return
        now = self.clock()
        start = window_start(now)
        if not await self.windows.take(user_id, start, self.per_minute):
            raise rate_limited(self.per_minute, (start + RATE_WINDOW - now).total_seconds())

    def user_guard(self, principal: Principal) -> UserGuard:
        """The daily budget and the stream cap of one call of the user's."""
        return UserGuard(self, principal)


class UserGuard:
    """The user's limits for one call of theirs, which an opening checks as figures
    (stream_cap, budget) where it stores its rows, a turn's or an open call's; refuse()
    raises what it found."""

    def __init__(self, gate: TurnGate, principal: Principal) -> None:
        self.gate, self.principal = gate, principal

    def stream_cap(self) -> int | None:
        """The other streams a new one may find (None: no cap)."""
        return self.gate.max_streams if self.gate.max_streams > 0 else None

    def budget(self) -> DayBudget | None:
        """The key's budget of the UTC day now, if it has one."""
        if not has_budget(self.principal):
            return None
        return DayBudget(self.gate.clock().astimezone(dt.UTC).date(),
                         self.principal.daily_token_budget,
                         self.principal.daily_cost_budget_usd)

    def refuse(self, refused: Refused) -> NoReturn:
        """The refusal for what an opening found: the budget first, then the cap."""
        if refused.over_budget(self.budget()):
            raise budget_exceeded(seconds_to_next_day(self.gate.clock()))
        raise too_many_streams(self.gate.max_streams)
