"""A turn's opening: its thread locked and moved to the top, the history the model is shown,
and its two rows stored, with every check that may refuse the turn run first.

Three ways, one result. A real user message whose checks are only the stream cap opens in ONE
statement without a transaction on PostgreSQL (app.store.turn_openings): one round trip
instead of four; on SQLite, in a transaction of the sqlite3 connection's own statements
(app.store.sqlite_turns), without SQLAlchemy's session: half the CPU. Every other
opening runs in a session's transaction: the thread's UPDATE first, then a
guard that reads under the thread's lock (the follow-up worker's), then the rows, then an
admission that reads more than the cap's count (a daily budget), then the commit. So does an
opening whose one statement found the thread changed by a transaction that committed while
it waited (its snapshot would lack that transaction's answer): it stored nothing, and the
transaction's statements each see what was committed before them."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncSession

from app.logging import get_logger
from app.services.turn_deps import TurnDeps
from app.store import messages as message_store
from app.store import sqlite_turns, turn_openings
from app.store import threads as thread_store
from app.store.messages import OpenedExchange
from app.store.models import Thread

log = get_logger("services.turn_opening")

#: Messages read for the context; the character budget then keeps the newest that fit.
CONTEXT_HISTORY_LIMIT = 200

#: A check inside the opening transaction, before anything is stored (see open_rows).
TurnGuard = Callable[[AsyncSession, Thread], Awaitable[None]]


class TurnAdmission(Protocol):
    """A check of the opening's, last before its commit (see open_rows)."""

    #: The opening's statement may count the user's other streaming answers for the check,
    #: under the user's lock (app.store.messages.open_exchange's `count_streams`).
    counts_streams: bool
    #: The whole check is that count under stream_cap() (nothing, without counts_streams):
    #: the opening's one statement can make it, with no transaction.
    cap_is_all: bool

    def stream_cap(self) -> int:
        """The turn passes when the user's other streaming answers are fewer than this."""

    def check_count(self, other_streams: int) -> None:
        """With cap_is_all: raises as __call__ would for the count the opening's one
        statement made."""

    async def __call__(self, session: AsyncSession, other_streams: int | None = None
                      ) -> None:
        """Raises to store nothing. `other_streams`: that count, or None when the opening
        did not make it."""


class ThreadNotFound(Exception):
    """No such thread for this user (a foreign thread is the same as a missing one)."""


async def open_rows(
    deps: TurnDeps, user_id: str, thread_id: uuid.UUID, content: str, *,
    synthetic: bool = False, trigger_type: str | None = None,
    trigger_reason: str | None = None, guard: TurnGuard | None = None,
    admit: TurnAdmission | None = None,
) -> tuple[Thread, OpenedExchange]:
    """The opened thread and the turn's rows. Raises ThreadNotFound, ThreadBusy or
    ContentTooLong, or what `guard` or `admit` raise, having stored nothing. `guard` runs
    once the thread is locked, before its history is read and anything is stored (the
    follow-up worker checks there, atomically, that the user has not replied meanwhile);
    `admit` once the turn's rows are in, last before the commit (the turn limits count the
    user's streams there, under a lock of the user's held to the commit)."""
    if guard is None and not synthetic and (admit is None or admit.cap_is_all):
        if deps.db.backend == "sqlite":
            return await _on_sqlite(deps, user_id, thread_id, content, admit)
        opened = await _in_one_statement(deps, user_id, thread_id, content, admit)
        if opened is not None:
            return opened
        log.info("turn_opening_retried", thread_id=str(thread_id))
    return await _in_transaction(
        deps, user_id, thread_id, content, synthetic=synthetic, trigger_type=trigger_type,
        trigger_reason=trigger_reason, guard=guard, admit=admit)


async def _in_one_statement(deps: TurnDeps, user_id: str, thread_id: uuid.UUID, content: str,
                            admit: TurnAdmission | None) -> tuple[Thread, OpenedExchange] | None:
    """None when the statement stored nothing for a reason the transaction may not share:
    the thread changed under it, or the cap it was given no longer holds."""
    cap = admit.stream_cap() if admit is not None and admit.counts_streams else None
    async with deps.db.one_statement() as runner:
        opening = await turn_openings.open_turn_rows(
            runner, user_id, thread_id, content, history_limit=CONTEXT_HISTORY_LIMIT,
            stream_cap=cap, max_chars=deps.settings.max_content_chars,
            process_id=deps.process_id)
    if opening is None:
        raise ThreadNotFound(str(thread_id))
    if opening.outcome == "at_cap" and admit is not None and opening.other_streams is not None:
        admit.check_count(opening.other_streams)  # the refusal, as in a transaction
    if opening.thread is None or opening.exchange is None:
        return None
    return opening.thread, opening.exchange


async def _on_sqlite(deps: TurnDeps, user_id: str, thread_id: uuid.UUID, content: str,
                     admit: TurnAdmission | None) -> tuple[Thread, OpenedExchange]:
    """As _in_one_statement, the count checked at the cap; the refusal raises inside the
    transaction, which then stores nothing."""
    async with deps.db.sqlite_writes() as writes:
        opened = sqlite_turns.open_turn_rows(
            writes, user_id, thread_id, content, history_limit=CONTEXT_HISTORY_LIMIT,
            count_streams=admit is not None and admit.counts_streams,
            max_chars=deps.settings.max_content_chars, process_id=deps.process_id)
        if opened is None:
            raise ThreadNotFound(str(thread_id))
        others = opened[1].other_streams
        if admit is not None and others is not None and others >= admit.stream_cap():
            admit.check_count(others)
    return opened


async def _in_transaction(
    deps: TurnDeps, user_id: str, thread_id: uuid.UUID, content: str, *, synthetic: bool,
    trigger_type: str | None, trigger_reason: str | None, guard: TurnGuard | None,
    admit: TurnAdmission | None,
) -> tuple[Thread, OpenedExchange]:
    async with deps.db.transaction(quick=True) as session:
        opened = await thread_store.open_for_turn(session, user_id, thread_id)
        if opened is None:
            raise ThreadNotFound(str(thread_id))
        if guard is not None:
            await guard(session, opened.thread)
        exchange = await message_store.open_exchange(
            session, opened, content, history_limit=CONTEXT_HISTORY_LIMIT,
            synthetic=synthetic, trigger_type=trigger_type, trigger_reason=trigger_reason,
            max_chars=deps.settings.max_content_chars, process_id=deps.process_id,
            count_streams=admit is not None and admit.counts_streams)
        if admit is not None:
            await admit(session, exchange.other_streams)
    return opened.thread, exchange
