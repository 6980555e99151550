"""One chat turn: the native API's adapter over the answer run (app.turn.run), read top to
bottom.

    turn = await open_turn(deps, user_id, thread_id, content)   # ThreadNotFound, ThreadBusy
    async for event in turn.events(): ...                        # app.answer.events.TurnEvent

open: the turn repository's opening reads the history and stores the user message and the
`streaming` assistant message (app/turn/admission/opening.py); no session is open while the
answer streams. stream: the run's stages, then each upstream chunk through the core's
AnswerStream, driven by the loop every API shares (app/turn/run/loop.py). finish: the run's,
however the stream ended: ONE transaction stores what was sent with an honest status,
exactly once (app/turn/run/persist.py); the turn adds its closing events and its summary line.
docs/architecture.md tells what ends a turn early."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, cast

from app.answer.answer import AnswerStream
from app.answer.call_usage import CallContext, main_call_record
from app.answer.continuation import continuation_messages, continued_metadata
from app.answer.events import AnswerOut, Started, TurnEvent
from app.answer.finish import (
    StoreResult,
    TurnOutcome,
    closing_events,
    not_stored,
    summary_fields,
)
from app.answer.inputs import UpstreamChunk
from app.answer.records import CallRecord, FinalStatus, FinishedMessage
from app.config.catalog import ModelNotAllowed, choose
from app.keys.service import Principal
from app.observe.logging import get_logger
from app.store.models import Message
from app.turn.admission.gate import TurnGate
from app.turn.admission.opening import (
    CONTEXT_HISTORY_LIMIT,
    TurnAdmission,
    leased,
    open_rows,
    opening_request,
)
from app.turn.deps import TurnDeps
from app.turn.holds.lease import TurnLease
from app.turn.observers.seam import ContextDraft, TurnView
from app.turn.rows import Fork, ThreadGuard
from app.turn.run.answer_run import AnswerPlan, AnswerRun, RunAdapter, observed
from app.upstream.wire import parse_chunk

log = get_logger("services.turn")

async def open_turn(
    deps: TurnDeps, user_id: str, thread_id: uuid.UUID, content: str | None, *,
    synthetic: bool = False, trigger_type: str | None = None,
    trigger_reason: str | None = None, guard: ThreadGuard | None = None,
    admit: TurnAdmission | None = None, model: str | None = None,
    allowed_models: Sequence[str] | None = None, fork: Fork | None = None,
    question: Message | None = None,
) -> Turn:
    """Raises ThreadNotFound, ThreadBusy, or GatewayBusy (no upstream slot in time; nothing
    stored), or what `guard` or `admit` raise to store nothing (app.turn.admission.opening).
    The slot is taken before the opening, so no transaction (on SQLite: the write lock) is
    held while waiting for one. `model`: the turn's choice (checked by the caller), kept as
    the thread's; None: the thread's last choice, else the catalog's default (among the
    key's `allowed_models` when it is limited). `fork`: the rows start a new version there
    (app.turn.rows.Fork); with `content` None, a new answer to `question`, a stored user
    message that `fork` makes the branch end at (Regenerate)."""
    lease, opened = await leased(deps, lambda: open_rows(deps, opening_request(
        deps, user_id, thread_id, content, synthetic=synthetic, trigger_type=trigger_type,
        trigger_reason=trigger_reason, admit=admit, model=model, fork=fork), guard=guard,
        admit=admit))
    user, history = opened.user, opened.history
    if user is None:
        assert question is not None, "a turn without content answers a stored question"
        user = question
        # the stored question ends the history read: the turn shows it as its question
        if history and history[-1][0] == "user" and history[-1][2] == question.created_at:
            history = history[:-1]
    view = TurnView.of(opened.thread, user, opened.assistant, history,
                       history_complete=len(history) < CONTEXT_HISTORY_LIMIT)
    try:
        chosen = choose(deps.models.catalog, model, opened.thread.model, allowed_models)
    except ModelNotAllowed:
        chosen = deps.models.catalog.default  # the key's models all left the catalog
    return Turn(deps, view, lease, model=chosen)


async def admit_turn(gate: TurnGate, principal: Principal, thread_id: uuid.UUID,
                     content: str | None, model: str | None = None, *,
                     fork: Fork | None = None, question: Message | None = None) -> Turn:
    """A user's turn, opened through the gate's limits (the one service the turn handler
    calls); raises ModelNotOffered or ModelNotAllowed for a `model` this key cannot use
    (before anything is counted or stored), TurnRefused (counted and logged by the gate), or
    open_turn's ThreadNotFound, ThreadBusy, ContentTooLong. `fork` and `question`: a new
    version (open_turn)."""
    if model is not None:
        choose(gate.deps.models.catalog, model, None, principal.allowed_models)
    guard = gate.user_guard(principal)

    async def opener() -> Turn:
        return await open_turn(gate.deps, principal.user_id, thread_id, content, admit=guard,
                               model=model, allowed_models=principal.allowed_models,
                               fork=fork, question=question)

    return await gate.admit(principal, opener)


@dataclass(frozen=True)
class CutAnswer:
    """A stored answer a turn finishes in place (Continue): its text, thinking and
    metadata as stored."""

    content: str
    reasoning: str | None
    reasoning_ms: int | None
    metadata: Mapping[str, Any]


class Turn(RunAdapter):
    """One turn between open and finish: its answer's state is the core's AnswerStream, its
    events the native API's; the run (app.turn.run) does the rest."""

    def __init__(self, deps: TurnDeps, view: TurnView, lease: TurnLease | None = None, *,
                 model: str | None = None, continues: CutAnswer | None = None) -> None:
        self.deps, self.view, self.message_id = deps, view, view.message_id
        self.continues = continues
        reasoning_format, reasoning_tag = deps.reasoning(model)
        tool_format, tool_tag = deps.tool_calls(model)  # no tools offered: text alone
        self.answer = AnswerStream(keep_raw=deps.settings.trace_streams != "off",
                                   reasoning_format=reasoning_format,
                                   reasoning_tag=reasoning_tag, tool_format=tool_format,
                                   tool_tag=tool_tag)
        if continues is not None:
            self.answer.carry_on(continues.content, continues.reasoning,
                                 continues.reasoning_ms)
        self.log_ids = {"user_id": view.user_id, "thread_id": str(view.thread_id),
                        "message_id": str(view.message_id)}
        self._closing: list[TurnEvent] = []
        catalog = deps.models.catalog
        plan: AnswerPlan[UpstreamChunk, TurnEvent | AnswerOut] = AnswerPlan(
            answer=self.answer, stored=self.answer, parse=parse_chunk, record=self._record,
            messages=self._messages, handlers=lambda: observed(deps, view), kind="turn",
            log=log, stage="llm_calls", finished=self._finished, settled=self._settled,
            metadata=self._continued)
        self.run = AnswerRun(deps, plan, lease or TurnLease(None, None),
                             user_id=view.user_id, log_ids=self.log_ids, view=view,
                             model=model if model and catalog.get(model) else catalog.default)

    @property
    def status(self) -> FinalStatus:
        return self.answer.status

    @property
    def store_result(self) -> StoreResult | None:
        return self.run.store_result

    @property
    def stored(self) -> bool:
        """The finished message was committed (False before finish() or when it failed)."""
        return self.run.store_result == "stored"

    @property
    def closing_events(self) -> list[TurnEvent]:
        """The events that close the stream once finish() has run. Empty only when a finish
        started elsewhere is still running: not stored yet."""
        return self._closing or [not_stored("failed")]

    async def events(self) -> AsyncGenerator[TurnEvent, None]:
        """The turn's events in order. Closing or cancelling this iterator interrupts the
        turn; it is stored either way (the loop's finish, app.turn.run.loop)."""
        started = Started(self.view.thread_id, self.view.user_message_id, self.message_id)
        async with aclosing(self.run.stream(first=(started,))) as events:
            async for out in events:
                if isinstance(out, tuple):  # a chunk that ended the thinking: its two events
                    yield out[0]
                    yield out[1]
                else:
                    yield out
        for event in self.closing_events:
            yield event

    def _messages(self, draft: ContextDraft) -> list[dict[str, Any]]:
        settings = self.deps.settings
        prompt = list(draft.prompt(self.view, settings.system_prompt,
                                   budget_chars=settings.context_budget_chars))
        if self.continues is None:
            return prompt
        return continuation_messages(prompt, self.continues.content)

    def _continued(self) -> dict[str, Any]:
        """An answer continued in place stores the figures and calls of all its calls."""
        if self.continues is None:
            return {}
        recorder = self.run.draft.recorder
        now = {**recorder.totals(), "response_metadata": dict(self.answer.metadata or {}),
               "processingDetails": {"pipeline_stages": dict(recorder.stages),
                                     "llm_calls": [c.as_metadata() for c in recorder.calls]}}
        return continued_metadata(self.continues.metadata, now)

    def _record(self, ctx: CallContext, *, prompt: Sequence[Mapping[str, Any]],
                started_at: dt.datetime, first_token_at: dt.datetime | None,
                finished_at: dt.datetime) -> CallRecord:
        # the native prompt is role and text alone (ContextDraft.prompt)
        return main_call_record(self.answer, ctx, prompt=cast(Sequence[Mapping[str, str]], prompt),
                                started_at=started_at,
                                first_token_at=first_token_at, finished_at=finished_at)

    def _finished(self, finished: FinishedMessage, outcome: TurnOutcome,
                  result: StoreResult) -> None:
        self._closing = closing_events(finished, self.answer, result)

    def _settled(self, finished: FinishedMessage, outcome: TurnOutcome,
                 result: StoreResult) -> None:
        """The turn's one summary line (`stored=false`: the row is left for the
        stale-streaming sweep, or gone with its thread)."""
        log.info("turn_finished", stored=result == "stored", **summary_fields(
            finished, outcome, duration_ms=self.run.draft.recorder.elapsed_ms()))
