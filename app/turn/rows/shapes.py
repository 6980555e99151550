"""What a turn's opening is asked to do and what it did: the shapes both databases' openings
share (app.turn.rows.postgres, app.turn.rows.sqlite), with the one rule of where
the new rows go in the thread's order."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from app.store.models import Message, Thread

#: The default limit on a user message, in characters (Settings.max_content_chars has the same
#: default; the API passes the configured value).
MAX_CONTENT_CHARS = 32_000
#: Between a thread's newest row and the next: created_at orders the turn even when the
#: clocks of several processes disagree or two writes share a microsecond.
TICK = dt.timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class DayBudget:
    """A key's daily budget: the turn is refused once the user's usage of `day` (every
    model, from the rollup) reached either figure. None: no budget of that kind."""

    day: dt.date
    tokens: int | None = None
    cost_usd: float | None = None

    def reached(self, tokens: int, cost_usd: float) -> bool:
        return ((self.tokens is not None and tokens >= self.tokens)
                or (self.cost_usd is not None and cost_usd >= self.cost_usd))


@dataclass(frozen=True, slots=True)
class Fork:
    """A turn that starts a new version: its rows follow `parent` (None: a new first
    message), and the thread's branch is made to end there first, in the opening's
    transaction (app.turn.rows.branches). Without one, a turn's rows follow the newest
    message of the branch."""

    parent: uuid.UUID | None


@dataclass(frozen=True, slots=True)
class OpeningRequest:
    """One turn's opening. `content` None: a turn without a question of its own (an OpenAI
    tool round continues an exchange whose question is stored), the answer's row alone.
    `history_limit`: how many of the thread's newest messages the model may be shown, read
    before the new rows are stored (0: none). `stream_cap`: the rows are stored only while
    the user's other streaming answers, counted under the user's lock, are fewer; `budget`:
    only while the user's usage of the day has not reached it."""

    user_id: str
    thread_id: uuid.UUID
    content: str | None
    history_limit: int = 0
    synthetic: bool = False
    trigger_type: str | None = None
    trigger_reason: str | None = None
    max_chars: int = MAX_CONTENT_CHARS
    process_id: str | None = None
    stream_cap: int | None = None
    budget: DayBudget | None = None
    #: The model the turn chose, kept as the thread's; None: the thread's stays.
    model: str | None = None
    #: Where the rows start a new version; None: after the branch's newest message.
    fork: Fork | None = None

    @property
    def cancels_followups(self) -> bool:
        """The user wrote: the thread's follow-ups, claimed ones too, are no longer wanted."""
        return self.content is not None and not self.synthetic


@dataclass(frozen=True, slots=True)
class CallOpening:
    """A call without a message (an OpenAI-style call without a thread), opened as one
    stream of the user's: its `open_calls` row is stored only under `stream_cap` (the
    user's other streams, answers and calls, counted under the user's lock, are fewer) and
    `budget`, as a turn's rows are."""

    user_id: str
    call_id: uuid.UUID
    process_id: str | None = None
    stream_cap: int | None = None
    budget: DayBudget | None = None


@dataclass(frozen=True, slots=True)
class Opened:
    """The opened thread (moved to the top of the list), the turn's rows (`user` None for a
    turn without a question) and the history the model is shown: (role, content,
    created_at), oldest first, read before the new rows were stored."""

    thread: Thread
    user: Message | None
    assistant: Message
    history: list[tuple[str, str, dt.datetime]]


@dataclass(frozen=True, slots=True)
class Refused:
    """Nothing was stored: the day's usage reached the budget, or the user's other streams
    the cap. Each figure as the opening read it; None when it was not asked to."""

    spent: tuple[int, float] | None = None
    other_streams: int | None = None

    def over_budget(self, budget: DayBudget | None) -> bool:
        return budget is not None and self.spent is not None and budget.reached(*self.spent)


def turn_times(now: dt.datetime, newest: dt.datetime | None, *, with_user: bool
               ) -> tuple[dt.datetime | None, dt.datetime]:
    """The new rows' created_at: the user's now, or just after the thread's newest message
    when the clock has not passed it, and the answer's just after that (None and the
    answer's own for a turn without a question). PostgreSQL's opening computes the same in
    its statement."""
    first = now if newest is None or now > newest else newest + TICK
    if not with_user:
        return None, first
    return first, first + TICK
