"""One chat turn: the I/O around the pure turn core (app/turns), read top to bottom.

    turn = await open_turn(deps, user_id, thread_id, content)   # ThreadNotFound, ThreadBusy
    async for event in turn.events(): ...                        # app.turns.events.TurnEvent

open: the turn repository's opening reads the history and stores the user message and the
`streaming` assistant message (app/turn/opening.py); no session is open while the
answer streams. stream: the observers' stages, then each upstream chunk
through the core's AnswerStream, driven by the loop both APIs share (app/turn/loop.py).
finish: however the stream ended, ONE transaction stores what was sent with an honest
status, exactly once (app/turn/persist.py).
docs/architecture.md draws the cancellation flow."""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing

import structlog

from app.catalog import ModelNotAllowed, choose
from app.clock import utcnow
from app.logging import get_logger
from app.records import CallRecord, FinalStatus, FinishedMessage
from app.turn.deps import TurnDeps
from app.turn.lease import TurnLease
from app.turn.loop import TurnLoop
from app.turn.model_calls import Messages, ModelCalls
from app.turn.observers import (
    ContextDraft,
    TurnHandler,
    TurnView,
    after_finish_all,
)
from app.turn.opening import (
    CONTEXT_HISTORY_LIMIT,
    TurnAdmission,
    open_rows,
    opening_request,
)
from app.turn.persist import TurnStore
from app.turn.rows import ThreadGuard
from app.turns.answer import AnswerStream
from app.turns.events import AnswerOut, Started, TurnEvent
from app.turns.finish import (
    StoreResult,
    TurnOutcome,
    calls_so_far,
    close_turn,
    closing_events,
    not_stored,
    summary_fields,
)
from app.turns.inputs import UpstreamChunk
from app.turns.usage import CallContext, main_call_record
from app.upstream import UpstreamClient, UpstreamError, UpstreamStream

log = get_logger("services.turn")

async def open_turn(
    deps: TurnDeps, user_id: str, thread_id: uuid.UUID, content: str, *,
    synthetic: bool = False, trigger_type: str | None = None,
    trigger_reason: str | None = None, guard: ThreadGuard | None = None,
    admit: TurnAdmission | None = None, model: str | None = None,
    allowed_models: Sequence[str] | None = None,
) -> Turn:
    """Raises ThreadNotFound, ThreadBusy, or GatewayBusy (no upstream slot in time; nothing
    stored), or what `guard` or `admit` raise to store nothing (app.turn.opening).
    The slot is taken before the opening, so no transaction (on SQLite: the write lock) is
    held while waiting for one. `model`: the turn's choice (checked by the caller), kept as
    the thread's; None: the thread's last choice, else the catalog's default (among the
    key's `allowed_models` when it is limited)."""
    lease = await TurnLease.take(deps.slots, deps.checkpoints, deps.precedence,
                                 deps.openings)
    request = opening_request(deps, user_id, thread_id, content, synthetic=synthetic,
                              trigger_type=trigger_type, trigger_reason=trigger_reason,
                              admit=admit, model=model)
    try:
        opened = await open_rows(deps, request, guard=guard, admit=admit)
    except BaseException:
        lease.give_back()
        raise
    assert opened.user is not None, "a turn with content stores its user message"
    history = opened.history
    view = TurnView.of(opened.thread, opened.user, opened.assistant, history,
                       history_complete=len(history) < CONTEXT_HISTORY_LIMIT)
    try:
        chosen = choose(deps.models.catalog, model, opened.thread.model, allowed_models)
    except ModelNotAllowed:
        chosen = deps.models.catalog.default  # the key's models all left the catalog
    return Turn(deps, view, lease, model=chosen)


class Turn:
    """One turn between open and finish; its answer's state is the core's AnswerStream."""

    def __init__(self, deps: TurnDeps, view: TurnView, lease: TurnLease | None = None, *,
                 model: str | None = None) -> None:
        self.deps, self.view, self.message_id = deps, view, view.message_id
        self._lease = lease or TurnLease(None, None)
        reasoning_format, reasoning_tag = deps.reasoning(model)
        tool_format, tool_tag = deps.tool_calls(model)  # no tools offered: text alone
        self.answer = AnswerStream(keep_raw=deps.settings.trace_streams != "off",
                                   reasoning_format=reasoning_format,
                                   reasoning_tag=reasoning_tag, tool_format=tool_format,
                                   tool_tag=tool_tag)
        self.draft = ContextDraft(summary=view.thread_summary)
        self.log_ids = {"user_id": view.user_id, "thread_id": str(view.thread_id),
                        "message_id": str(view.message_id)}
        self._handlers: list[TurnHandler] = []
        self._prompt: list[dict[str, str]] = []
        self._stream: UpstreamStream | None = None
        self._call_started = utcnow()
        #: finish() has started: the turn is ending, whatever else happens now.
        self.finishing = False
        #: Why the turn is being stopped before its end, if it is (`stopping`).
        self.stopped_by: str | None = None
        self._closing: list[TurnEvent] = []
        self.store_result: StoreResult | None = None
        self._loop: TurnLoop[UpstreamChunk, TurnEvent | AnswerOut] = TurnLoop(
            self.answer, self._lease, self.draft.recorder, log=log, name="turn",
            finish=self.finish)
        catalog = deps.models.catalog
        self.calls = ModelCalls(deps, model if model and catalog.get(model) else
                                catalog.default, self.draft.recorder)

    @property
    def status(self) -> FinalStatus:
        return self.answer.status

    def stopping(self, reason: str) -> None:
        """Whatever ends the turn before its answer's end says why first
        (app.turns.interruptions): an `interrupted` row says so. The first reason stays."""
        if self.stopped_by is None:
            self.stopped_by = reason

    @property
    def stored(self) -> bool:
        """The finished message was committed (False before finish() or when it failed)."""
        return self.store_result == "stored"

    @property
    def closing_events(self) -> list[TurnEvent]:
        """The events that close the stream once finish() has run. Empty only when a finish
        started elsewhere is still running: not stored yet."""
        return self._closing or [not_stored("failed")]

    async def events(self) -> AsyncGenerator[TurnEvent, None]:
        """The turn's events in order. Closing or cancelling this iterator interrupts the
        turn; it is stored either way (the loop's finish, app.turn.loop)."""
        structlog.contextvars.bind_contextvars(**self.log_ids)
        self._lease.checkpoint(self.message_id, lambda: self.answer.content, self._calls_so_far,
                               lambda: self.answer.reasoning)
        started = Started(self.view.thread_id, self.view.user_message_id, self.message_id)
        async with aclosing(self._loop.run(self._open_chunks, first=(started,),
                                           prepare=self._prepare, stage="llm_calls",
                                           resume=self._resume)) as events:
            async for out in events:
                if isinstance(out, tuple):  # a chunk that ended the thinking: its two events
                    yield out[0]
                    yield out[1]
                else:
                    yield out
        for event in self.closing_events:
            yield event

    async def _prepare(self) -> None:
        """The observers' stages, then the prompt they shaped."""
        self._handlers = [h for o in self.deps.observers if (h := o.open(self.view))]
        self._loop.handlers = self._handlers
        for handler in self._handlers:
            await handler.before_main(self.draft)
        settings = self.deps.settings
        with self.draft.recorder.stage("context"):
            self._prompt = self.draft.prompt(self.view, settings.system_prompt,
                                             budget_chars=settings.context_budget_chars)

    def _calls_so_far(self) -> list[CallRecord]:
        """The checkpoint's calls (app.turn.checkpoints): a crash keeps their usage."""
        return calls_so_far(self.answer, self.draft.recorder, self._call_context(),
                            prompt=self._prompt, started_at=self._call_started)

    def _call_context(self) -> CallContext:
        """What the main call's record is priced and described by."""
        return self.calls.context()

    async def _open_chunks(self) -> AsyncGenerator[UpstreamChunk, None]:
        """The main call sent (to the next model of the list while one fails before
        answering); its chunks, once a model server has answered."""
        self._call_started = utcnow()
        try:
            self._stream = await self.calls.open(_send, self._prompt)
        finally:
            self._call_started = self.calls.started_at
        self._lease.upstream_answered()
        return self._stream.chunks()

    async def _resume(self, exc: UpstreamError) -> AsyncGenerator[UpstreamChunk, None] | None:
        """The answer broke off mid-answer: the call that finishes it, if any."""
        stream = self._stream

        def failed_call() -> CallRecord:
            return main_call_record(
                self.answer, self._call_context(), prompt=self._prompt,
                started_at=self._call_started, first_token_at=self.draft.recorder.first_token_at,
                finished_at=utcnow())

        if stream is not None:
            await stream.close()
        following = await self.calls.resume(exc, self.answer.said(), _send, failed_call)
        if following is None:
            return None
        self._stream, self._call_started = following, self.calls.started_at
        self._prompt = [dict(m) for m in self.calls.messages]
        return following.chunks()

    async def finish(self) -> None:
        """Close the upstream, store the message with its status and usage, exactly once.
        The ids are bound here too: the SSE response may finish a turn whose events() never
        ran (the client left first)."""
        if self.finishing:
            return
        self.finishing = True
        with structlog.contextvars.bound_contextvars(**self.log_ids):
            await self._lease.close_and_give_back(self._stream)
            finished, outcome = close_turn(
                self.message_id, self.answer, self.draft.recorder, self._call_context(),
                prompt=self._prompt, started_at=self._call_started,
                stopped_by=self.stopped_by)
            finished.metadata["answered_by"] = self.calls.answered_by()
            store = TurnStore(self.deps.db, self.deps.rows, self.view.user_id, self._handlers)
            self.store_result = await store.store_then(
                finished, outcome, lambda result: self._settle(result, finished, outcome))
            self._closing = closing_events(finished, self.answer, self.store_result)

    async def _settle(self, result: StoreResult, finished: FinishedMessage,
                      outcome: TurnOutcome) -> None:
        """The message's fate is known: the hooks after the store, then the turn's one
        summary line (`stored=false`: the row is left for the stale-streaming sweep, or gone
        with its thread)."""
        self.store_result = result
        await after_finish_all(self._handlers, finished, outcome, stored=self.stored)
        log.info("turn_finished", stored=self.stored, **summary_fields(
            finished, outcome, duration_ms=self.draft.recorder.elapsed_ms()))


async def _send(client: UpstreamClient, messages: Messages) -> UpstreamStream:
    return await client.open_stream(messages)
