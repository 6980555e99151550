"""Continue: a thread's last answer, cut at its token limit or interrupted, finished in place.
No question is added: the same row goes back to `streaming`, the model is asked to go on
from its text (app.answer.continuation), and what it writes joins that text through the
filter in continuing mode, as after a mid-answer failure. The row's finish stores the whole
answer; the new call is billed with its own llm_calls rows, as the earlier ones were."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.continuation import cut_short
from app.config.catalog import ModelNotAllowed, choose
from app.core.clock import utcnow
from app.keys.limits_repository import lock_user_and_count_streaming
from app.keys.service import Principal
from app.observe.logging import get_logger
from app.threads import repository as thread_store
from app.turn.admission.gate import TurnGate
from app.turn.admission.opening import CONTEXT_HISTORY_LIMIT, ThreadNotFound, TurnAdmission, leased
from app.turn.deps import TurnDeps
from app.turn.native.turn import CutAnswer, Turn
from app.turn.observers.seam import TurnView
from app.turn.rows import Refused
from app.turn.rows.messages import context_rows, last_message, question_of, reopen_answer
from app.usage.repository import usage_of_day

log = get_logger("services.turn")


class NotContinuable(Exception):
    """The answer cannot be continued now; `code` is the API's error code, the message a
    sentence for the user."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class MessageNotFound(Exception):
    """No such answer in this user's thread."""


async def admit_continuation(gate: TurnGate, principal: Principal, thread_id: uuid.UUID,
                             message_id: uuid.UUID) -> Turn:
    """The turn that finishes the answer `message_id`, opened through the gate's limits as
    a new turn is. Raises ThreadNotFound, MessageNotFound, NotContinuable, TurnRefused."""
    guard = gate.user_guard(principal)

    async def opener() -> Turn:
        return await open_continuation(gate.deps, principal.user_id, thread_id, message_id,
                                       admit=guard, allowed_models=principal.allowed_models)

    return await gate.admit(principal, opener)


async def open_continuation(
    deps: TurnDeps, user_id: str, thread_id: uuid.UUID, message_id: uuid.UUID, *,
    admit: TurnAdmission | None = None, allowed_models: Sequence[str] | None = None,
) -> Turn:
    """The answer reopened under the turn's lease, with the model of its thread."""
    lease, (view, cut, thread_model) = await leased(
        deps, lambda: _reopen(deps, user_id, thread_id, message_id, admit))
    try:
        chosen = choose(deps.models.catalog, None, thread_model, allowed_models)
    except ModelNotAllowed:
        chosen = deps.models.catalog.default
    log.info("answer_continued", thread_id=str(thread_id), message_id=str(message_id))
    return Turn(deps, view, lease, model=chosen, continues=cut)


async def _reopen(deps: TurnDeps, user_id: str, thread_id: uuid.UUID, message_id: uuid.UUID,
                  admit: TurnAdmission | None) -> tuple[TurnView, CutAnswer, str | None]:
    """In one transaction, under the thread's lock: the checks, the user's limits, the row
    made `streaming` again, and the history before its question."""
    async with deps.db.transaction() as session:
        thread = await thread_store.lock_thread(session, user_id, thread_id)
        if thread is None:
            raise ThreadNotFound(str(thread_id))
        last = await last_message(session, thread_id)
        if last is None or last.id != message_id:
            found = await thread_store.get_message(session, user_id, message_id)
            if found is None or found.thread_id != thread_id:
                raise MessageNotFound(str(message_id))
            raise NotContinuable("not_last_answer",
                                 "only the thread's last answer can be continued")
        if last.role != "assistant" or not cut_short(last.status, last.meta):
            raise NotContinuable(
                "not_continuable", "only an answer that was interrupted or cut at its "
                "token limit can be continued")
        question = await question_of(session, last)
        if question is None:
            raise NotContinuable("not_continuable", "this answer has no question to go on from")
        if admit is not None:
            await _check_limits(session, user_id, admit)
        history = [row for row in await context_rows(session, thread_id,
                                                     limit=CONTEXT_HISTORY_LIMIT)
                   if row[2] < question.created_at]
        cut = CutAnswer(last.content, last.reasoning, last.reasoning_ms, dict(last.meta))
        await reopen_answer(session, last, process_id=deps.process_id, now=utcnow())
        view = TurnView.of(thread, question, last, history,
                           history_complete=len(history) < CONTEXT_HISTORY_LIMIT - 2)
        return view, cut, thread.model


async def _check_limits(session: AsyncSession, user_id: str,
                        admit: TurnAdmission) -> None:
    """The stream cap and the daily budget, as a new turn's opening checks them."""
    others = await lock_user_and_count_streaming(session, user_id)
    budget = admit.budget()
    spent = (await usage_of_day(session, user_id, budget.day) if budget is not None
             else None)
    refused = Refused(spent, others)
    cap = admit.stream_cap()
    if refused.over_budget(budget) or (cap is not None and others >= cap):
        admit.refuse(refused)
