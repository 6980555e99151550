"""The turn's repository as its callers see it: one opening, one finish and one bill, each
with exactly one implementation per database (app.turn.rows.postgres,
app.turn.rows.sqlite). A caller never asks which database runs."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.records import CallRecord, FinishedMessage
from app.store.models import Message
from app.turn.rows.messages import HistoryRow
from app.turn.rows.shapes import CallOpening, Opened, OpeningRequest, Refused


@dataclass(frozen=True, slots=True)
class FinishedRow:
    """A finished message as stored, and its thread's autonomy settings as the finish read
    them, under the thread's lock: as they are now, not as they were when the turn opened."""

    message: Message
    thread_autonomy: dict[str, Any]


#: A check of the opening's, in its transaction once the user's thread is locked and before
#: anything is stored: it raises to store nothing (the follow-up worker checks there,
#: atomically, that the user has not replied meanwhile).
ThreadGuard = Callable[[AsyncSession, uuid.UUID], Awaitable[None]]
#: Writes of the finish's, in its transaction once the message's are in (the observers').
FinishHook = Callable[[AsyncSession, FinishedRow], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class SweptAnswer:
    """An answer or an open call swept from a dead process, and the calls its last
    checkpoint carried: they were made and paid for, though no finish ran. An open call has
    no message nor thread (None)."""

    message_id: uuid.UUID | None
    thread_id: uuid.UUID | None
    user_id: str
    calls: Sequence[CallRecord]


class RolledBack(Exception):
    """Raised inside an opening's transaction to store nothing and answer `refused`."""

    def __init__(self, refused: Refused) -> None:
        super().__init__("refused")
        self.refused = refused


class TurnRows(Protocol):
    """Every write of a turn's rows."""

    async def open(self, request: OpeningRequest, guard: ThreadGuard | None = None
                   ) -> Opened | Refused | None:
        """The turn's rows, or why none were stored: Refused (the cap, the budget), None (a
        missing or foreign thread). Raises ContentTooLong, ThreadBusy (the thread already
        streams) or what `guard` raises, having stored nothing."""

    async def open_in(self, session: AsyncSession, request: OpeningRequest
                      ) -> Opened | Refused | None:
        """The same opening as statements of the caller's transaction."""

    async def finish(self, finished: FinishedMessage,
                     hook: FinishHook | None = None) -> FinishedRow:
        """The answer stored as finished, its calls and the day's rollup, with `hook`'s
        writes in the same transaction. Raises MessageNotFound (its thread was deleted) or
        MessageAlreadyFinished (its usage must not be counted twice; or a sweep took the
        row over, and it stands), storing nothing: only a row still `streaming` is written."""

    async def open_call(self, opening: CallOpening) -> Refused | None:
        """The call's `open_calls` row, stored under the cap and the budget (None), or why
        not (Refused), having stored nothing."""

    async def bill(self, user_id: str, calls: Sequence[CallRecord],
                   open_call: uuid.UUID | None = None) -> None:
        """Calls that belong to no message (an OpenAI-style call without a thread, a turn
        whose thread was deleted while it streamed): their llm_calls rows and the user's
        rollup, as a finish records them, and the `open_call` row they were made under
        deleted with them (once billed, the call no longer counts among the user's streams).
        The calls were made and paid for."""

    async def history_until(self, user_id: str, answer_id: uuid.UUID, *, limit: int
                            ) -> tuple[uuid.UUID, list[HistoryRow]] | None:
        """The thread of the user's answer `answer_id` and its newest `limit` messages up to
        it, as a turn's history holds them (app.turn.rows.messages); None: no such answer
        of the user's."""

    async def new_thread(self, user_id: str, *, origin: str) -> uuid.UUID:
        """A new, empty thread of the user's (for an answer that starts one)."""

    async def drop_thread(self, user_id: str, thread_id: uuid.UUID) -> None:
        """The thread made for an answer refused before its rows were stored, deleted."""

    async def bill_swept(self, session: AsyncSession, swept: Sequence[SweptAnswer]) -> None:
        """The calls of answers the dead-process sweep closed, with their message: their
        llm_calls rows and their users' rollups, as statements of the sweep's transaction
        (one of Database.transaction(quick=True)'s), so a row is swept and billed once."""
