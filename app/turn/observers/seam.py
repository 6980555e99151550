"""The seam for work that plugs into a turn without rewriting it: extra upstream calls before
the main one (title, summary, memory recall), stream traces, metrics, follow-up scheduling,
message announcements.

An observer is asked once per turn, `open(view)`, and returns a handler for that turn (or
None to sit it out); per-turn state lives on the handler. Handlers see plain values only:
the `TurnView` of the turn's messages, a `ContextDraft` to add to the request before the main
call, and the `TurnOutcome` of the stream. Hooks run in this order:

    before_main              may add calls (title, summary) and context (summary, memories)
    on_warning               each MarkerFilter warning (sync, cheap)
    may_write_in_finish      before the finish: whether in_finish_transaction may write
    in_finish_transaction    inside the transaction that stores the message, in a savepoint
                             of its own: if it raises, its writes roll back, the failure is
                             logged and the message is stored all the same
    after_finish             once, after that transaction: `stored` says whether it committed
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.finish import TurnOutcome
from app.answer.recorder import TurnRecorder
from app.answer.records import CallRecord, FinishedMessage
from app.context import ContextItem, build_msg_context, build_upstream_messages
from app.observe.logging import get_logger
from app.store.models import Message, Thread
from app.store.visibility import is_hidden
from app.stream import FilterWarning
from app.turn.rows import FinishedRow

log = get_logger("services.observers")


@dataclass(frozen=True, slots=True)
class TurnView:
    """The turn as observers may see it: ids, the user's message, the thread as it was when
    the turn opened, and the history the model is shown."""

    user_id: str
    thread_id: uuid.UUID
    message_id: uuid.UUID
    user_message_id: uuid.UUID
    user_text: str
    user_message_at: dt.datetime
    #: A synthetic (follow-up) prompt; hidden from the user's history.
    synthetic: bool
    hidden: bool
    thread_title: str | None
    thread_summary: str | None
    history: tuple[ContextItem, ...]
    #: The thread's own autonomy settings (the follow-ups'), as stored when the turn opened.
    thread_autonomy: Mapping[str, Any] | None = None
    #: `history` is all of the thread's history the model may see (it was read whole, not cut
    #: at the read's limit), so nothing older is left for memory recall to find.
    history_complete: bool = False

    @classmethod
    def of(cls, thread: Thread, user: Message, assistant: Message,
           history: Sequence[tuple[str, str, dt.datetime]], *, history_complete: bool = False
           ) -> TurnView:
        """The view of a turn just opened: its thread, its two messages, its history."""
        return cls(
            user_id=user.user_id, thread_id=thread.id, message_id=assistant.id,
            user_message_id=user.id, user_text=user.content, user_message_at=user.created_at,
            synthetic=user.synthetic is True, hidden=is_hidden(user),
            thread_title=thread.title, thread_summary=thread.summary,
            history=tuple(ContextItem(role, text, at) for role, text, at in history),
            history_complete=history_complete, thread_autonomy=thread.autonomy)


@dataclass
class ContextDraft:
    """What stages before the main call may add to it: a newer summary, recalled memories,
    and the records of the calls they made (timed as pipeline stages)."""

    summary: str | None
    memories: list[ContextItem] = field(default_factory=list)
    recorder: TurnRecorder = field(default_factory=TurnRecorder)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        with self.recorder.stage(name):
            yield

    def add_call(self, call: CallRecord) -> None:
        self.recorder.add_call(call)

    def prompt(self, view: TurnView, system_prompt: str, *, budget_chars: int
               ) -> list[dict[str, str]]:
        """The main call's messages: the system prompt, then the history within the budget,
        the summary and the memories as the MSG_CONTEXT marker, before the user's text."""
        marker = build_msg_context(list(view.history), budget_chars=budget_chars,
                                   summary=self.summary, memories=self.memories)
        return build_upstream_messages(system_prompt, marker, view.user_text)


class TurnHandler:
    """One observer's hooks for one turn; every hook is a no-op by default."""

    async def before_main(self, draft: ContextDraft) -> None:
        """Must not hold a database session across awaits of upstream calls."""

    def on_warning(self, warning: FilterWarning) -> None:
        """Each filter warning with its chunk index and offset."""

    async def in_finish_transaction(
        self, session: AsyncSession, finished: FinishedMessage, outcome: TurnOutcome,
        row: FinishedRow,
    ) -> None:
        """Writes that must commit with the message, or not at all. `row` is the message as
        stored and its thread as the finish read it, under the thread's lock."""

    def may_write_in_finish(self, finished: FinishedMessage, outcome: TurnOutcome) -> bool:
        """Whether in_finish_transaction may have anything to do, asked before the finish:
        when no handler may, the finish on PostgreSQL is one statement and no transaction
        (one round trip instead of three). A handler that said no and then finds it has
        writes after all (writes_in_finish, from the stored row) has them run in a
        transaction of their own, right after the message's."""
        return type(self).in_finish_transaction is not TurnHandler.in_finish_transaction

    def writes_in_finish(self, finished: FinishedMessage, outcome: TurnOutcome,
                         row: FinishedRow) -> bool:
        """Whether in_finish_transaction has anything to do for this finish; it runs only
        when this says so. Each hook that has costs the finishing transaction a savepoint
        (two statements)."""
        return type(self).in_finish_transaction is not TurnHandler.in_finish_transaction

    async def after_finish(
        self, finished: FinishedMessage, outcome: TurnOutcome, *, stored: bool
    ) -> None:
        """Once the finishing transaction committed (`stored`), or was given up on."""


class TurnObserver(Protocol):
    def open(self, view: TurnView) -> TurnHandler | None:
        """This observer's handler for the turn, or None when it has nothing to do."""


async def after_finish_all(handlers: Sequence[TurnHandler], finished: FinishedMessage,
                           outcome: TurnOutcome, *, stored: bool) -> None:
    """Every handler's `after_finish`; one that fails is logged and stops none of the rest."""
    for handler in handlers:
        try:
            await handler.after_finish(finished, outcome, stored=stored)
        except Exception as exc:
            log.exception("turn_observer_failed", observer=type(handler).__name__,
                          hook="after_finish", error=type(exc).__name__)


def report_warnings(warnings: Sequence[FilterWarning], handlers: Sequence[TurnHandler]) -> None:
    """Each new filter warning: one log line, then every handler's `on_warning`."""
    for warning in warnings:
        log.warning("filter_warning", **warning.log_fields())
        for handler in handlers:
            handler.on_warning(warning)
