"""A turn's opening: its thread locked and moved to the top, the history the model is shown,
and its rows stored, with every check that may refuse the turn made first, in the turn
repository's one opening (app.turn.rows): the stream cap and the daily budget as
figures it checks, a follow-up's guard as reads in its transaction."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import NoReturn, Protocol, TypeVar

from app.observe.logging import get_logger
from app.turn.deps import TurnDeps
from app.turn.holds.lease import TurnLease
from app.turn.rows import (
    CallOpening,
    DayBudget,
    Fork,
    Opened,
    OpeningRequest,
    Refused,
    ThreadGuard,
)

log = get_logger("services.turn_opening")

T = TypeVar("T")

#: Messages read for the context; the character budget then keeps the newest that fit.
CONTEXT_HISTORY_LIMIT = 200


class TurnAdmission(Protocol):
    """The user's limits an opening checks before it stores anything (app.turn.admission.gate'
    UserGuard)."""

    def stream_cap(self) -> int | None:
        """The turn passes while the user's other streams are fewer (None: no cap)."""

    def budget(self) -> DayBudget | None:
        """The key's daily budget, if it has one."""

    def refuse(self, refused: Refused) -> NoReturn:
        """Raises the refusal for what the opening found."""


class ThreadNotFound(Exception):
    """No such thread for this user (a foreign thread is the same as a missing one)."""


def opening_request(
    deps: TurnDeps, user_id: str, thread_id: uuid.UUID, content: str | None, *,
    history_limit: int = CONTEXT_HISTORY_LIMIT, synthetic: bool = False,
    trigger_type: str | None = None, trigger_reason: str | None = None,
    admit: TurnAdmission | None = None, model: str | None = None, fork: Fork | None = None,
) -> OpeningRequest:
    """The opening of a turn of this process's, with the user's limits."""
    return OpeningRequest(
        user_id, thread_id, content, history_limit=history_limit, synthetic=synthetic,
        trigger_type=trigger_type, trigger_reason=trigger_reason,
        max_chars=deps.settings.max_content_chars, process_id=deps.process_id,
        stream_cap=admit.stream_cap() if admit is not None else None,
        budget=admit.budget() if admit is not None else None, model=model, fork=fork)


async def open_rows(deps: TurnDeps, request: OpeningRequest, *,
                    guard: ThreadGuard | None = None, admit: TurnAdmission | None = None
                    ) -> Opened:
    """The opened thread and the turn's rows. Raises ThreadNotFound, ThreadBusy,
    ContentTooLong, what `guard` raises, or `admit`'s refusal, having stored nothing."""
    opened = await deps.rows.open(request, guard)
    if opened is None:
        raise ThreadNotFound(str(request.thread_id))
    if isinstance(opened, Refused):
        if admit is None:
            raise RuntimeError("an opening without limits was refused")
        admit.refuse(opened)
    return opened


async def open_call_row(deps: TurnDeps, user_id: str, admit: TurnAdmission) -> uuid.UUID:
    """The open call of a call that stores no message (app.turn.rows.open_call): one of the
    user's streams from now until its bill, stored under the user's limits as a turn's rows
    are. Returns its id; raises `admit`'s refusal, having stored nothing."""
    call_id = uuid.uuid4()
    refused = await deps.rows.open_call(CallOpening(
        user_id, call_id, deps.process_id, admit.stream_cap(), admit.budget()))
    if refused is not None:
        admit.refuse(refused)
    return call_id


async def leased(deps: TurnDeps, opening: Callable[[], Awaitable[T]]) -> tuple[TurnLease, T]:
    """The answer's lease (app.turn.holds.lease), then what `opening` stores under it;
    the lease is given back when the opening raises. The lease comes first, so no
    transaction (on SQLite: the write lock) is held while waiting for a slot."""
    lease = await TurnLease.take(deps.slots, deps.checkpoints, deps.precedence, deps.openings)
    try:
        return lease, await opening()
    except BaseException:
        lease.give_back()
        raise
