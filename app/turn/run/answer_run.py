"""One running answer, whatever API asked for it: the shell around the turn loop, written once.

    run = AnswerRun(deps, plan, lease, user_id=..., model=..., log_ids=..., view=view)
    await run.start()                        # optional: send now (raises UpstreamError)
    async for out in run.stream(): ...       # what the plan's answer state shows
    await run.finish()                       # always; idempotent

The run owns what every answer does: the lease and its checkpoints, the observers' stages
and the prompt, the main call across the model list (app.turn.run.model_calls) and its
continuation after a mid-answer failure, the loop (app.turn.run.loop), the calls so far, the
main call's record, and the finish: the message stored in its thread (app.turn.run.persist), or,
for an answer without a thread, its calls billed under its open call. The plan (AnswerPlan)
holds what differs: the answer's state (the native turn's AnswerStream, the OpenAI-style
call's ChoiceSet), how a chunk is read, the messages sent and the adapter's own endings.
The adapters (app.turn.native.turn, app.turn.run.completion) translate their wire format to a plan
and the run's output to their frames; a change to how an answer runs is made here."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol

import structlog

from app.answer.answer import AnswerStream
from app.answer.call_usage import CallContext
from app.answer.events import TurnFailure
from app.answer.finish import StoreResult, TurnOutcome, finished_message, outcome_of
from app.answer.records import CallRecord, FinishedMessage
from app.core.clock import utcnow
from app.kit.shield import run_shielded
from app.turn.deps import TurnDeps
from app.turn.holds.lease import TurnLease
from app.turn.observers.seam import ContextDraft, TurnHandler, TurnView, after_finish_all
from app.turn.run.loop import AnswerState, OutT, TurnLoop
from app.turn.run.model_calls import Messages, ModelCalls
from app.turn.run.persist import TurnStore
from app.upstream import UpstreamClient, UpstreamError, UpstreamStream
from app.upstream.client import ChunkT

#: Attempts at billing an answer without a thread (a thread's finish has TurnStore's
#: retries; a call without a message has only this one row set to write).
USAGE_ATTEMPTS, USAGE_RETRY_PAUSE_S = 3, 0.2


class MainCallRecord(Protocol):
    """The main call's record from the answer's state, measured until `finished_at`."""

    def __call__(self, ctx: CallContext, *, prompt: Sequence[Mapping[str, Any]],
                 started_at: dt.datetime, first_token_at: dt.datetime | None,
                 finished_at: dt.datetime) -> CallRecord: ...


def _nothing(*_: Any) -> None:
    return None


@dataclass(frozen=True)
class AnswerPlan(Generic[ChunkT, OutT]):
    """What differs between the answers a run runs; everything else is the run's."""

    #: The state the loop feeds: native events (AnswerStream) or choice deltas (ChoiceSet).
    answer: AnswerState[ChunkT, OutT]
    #: The answer a thread stores and the checkpoints write (the state's choice 0).
    stored: AnswerStream
    #: An upstream event's JSON as a chunk of that state (app.upstream.wire).
    parse: Callable[[Any], ChunkT]
    #: The main call's record from that state.
    record: MainCallRecord
    #: The messages sent, once the observers' stages have shaped the draft.
    messages: Callable[[ContextDraft], list[dict[str, Any]]]
    #: The observers that hear the answer, opened as it starts.
    handlers: Callable[[], list[TurnHandler]]
    #: Names the log events (`<kind>_failed`, `<kind>_error`).
    kind: str
    log: structlog.stdlib.BoundLogger
    #: What the model server gets besides the messages (a client's own fields).
    params: Mapping[str, Any] = field(default_factory=dict)
    #: The recorder's stage a run that is not started before it streams runs its call in.
    stage: str | None = None
    #: What the stored message says besides the core's metadata (a tool call answer's calls).
    metadata: Callable[[], Mapping[str, Any]] = dict
    #: Once the inline store answered: the adapter's endings (its closing events, figures).
    finished: Callable[[FinishedMessage, TurnOutcome, StoreResult], None] = _nothing
    #: Once the message's fate is known (later than `finished` after a late store).
    settled: Callable[[FinishedMessage, TurnOutcome, StoreResult], None] = _nothing


def observed(deps: TurnDeps, view: TurnView) -> list[TurnHandler]:
    """The observers' handlers of an answer stored in a thread."""
    return [h for o in deps.observers if (h := o.open(view))]


class AnswerRun(Generic[ChunkT, OutT]):
    """One answer between its opening and its finish. `view`: stored in its thread; else
    `open_call`: an answer without a thread, among the user's streams until billed."""

    def __init__(self, deps: TurnDeps, plan: AnswerPlan[ChunkT, OutT], lease: TurnLease, *,
                 user_id: str, model: str, log_ids: Mapping[str, str],
                 view: TurnView | None = None, open_call: uuid.UUID | None = None) -> None:
        self.deps, self.plan, self.user_id, self.view = deps, plan, user_id, view
        self.open_call, self.log_ids = open_call, dict(log_ids)
        self.draft = ContextDraft(summary=view.thread_summary if view else None)
        self.handlers: list[TurnHandler] = []
        self.calls = ModelCalls(deps, model, self.draft.recorder, params=plan.params)
        #: finish() has started: the answer is ending, whatever else happens now.
        self.finishing = False
        #: Why the answer is being stopped before its end, if it is (`stopping`).
        self.stopped_by: str | None = None
        self.store_result: StoreResult | None = None
        #: How whoever drives the answer ends it in its API's terms (`ends_with`), and why
        #: the process ended it, if it did (`end`).
        self._driver: Callable[[str], None] | None = None
        self._ended: str | None = None
        self._lease = lease
        self._prompt: list[dict[str, Any]] = []
        self._stream: UpstreamStream | None = None
        self._opened: AsyncGenerator[ChunkT, None] | None = None
        self._call_started = utcnow()
        self._loop: TurnLoop[ChunkT, OutT] = TurnLoop(
            plan.answer, lease, self.draft.recorder, log=plan.log, name=plan.kind,
            finish=self.finish)

    def stopping(self, reason: str) -> None:
        """Whatever ends the answer before its end says why first (app.answer.interruptions):
        stored, an `interrupted` row says so. The first reason stays."""
        if self.stopped_by is None:
            self.stopped_by = reason

    def end(self, reason: str) -> None:
        """The process ends the answer now, whatever API runs it (the fence:
        app.turn.holds.running): `reason` is what its row says, unless its finish had begun,
        and its driver ends it in its API's terms; a driver that comes later ends it as it
        comes."""
        if self._ended is None:
            self._ended = reason
        if not self.finishing:
            self.stopping(reason)
        if self._driver is not None:
            self._driver(reason)

    def ends_with(self, driver: Callable[[str], None] | None) -> None:
        """`driver` ends the answer when the process ends it (None: no longer); at once when
        the process already has."""
        self._driver = driver
        if driver is not None and self._ended is not None:
            driver(self._ended)

    def _running(self) -> None:
        """Among the process's running answers until the finish is over (ended at once
        when the process is fenced)."""
        self.deps.running.add(self, self.end)

    async def start(self) -> None:
        """The observers' stages, then the main call sent now, so that a refused or
        unreachable model server is the caller's status, not a broken stream. Raises
        UpstreamError (or a gateway bug) having failed the answer and finished the run."""
        structlog.contextvars.bind_contextvars(**self.log_ids)
        self._running()
        self._checkpoint()
        try:
            await self._prepare()
            self._opened = await self._open_chunks()
        except UpstreamError as exc:
            failure = TurnFailure(exc.code, exc.message, exc.http_status, exc.retry_after_s)
            self.plan.answer.fail(failure, flush=False)
            await run_shielded(self.finish())
            raise
        except BaseException:
            self.plan.answer.fail(TurnFailure("internal_error", "the gateway failed"),
                                  flush=False)
            await run_shielded(self.finish())
            raise

    def stream(self, first: Sequence[OutT] = ()) -> AsyncGenerator[OutT, None]:
        """What the answer's state shows, in order (the loop's, app.turn.run.loop): after
        `first`, a run not started prepares and sends within the plan's stage. Closing it
        interrupts the answer; the finish runs either way."""
        structlog.contextvars.bind_contextvars(**self.log_ids)
        self._running()
        opened = self._opened
        if opened is not None:
            async def started() -> AsyncGenerator[ChunkT, None]:
                return opened

            return self._loop.run(started, first=first, resume=self._resume)
        self._checkpoint()
        return self._loop.run(self._open_chunks, first=first, prepare=self._prepare,
                              stage=self.plan.stage, resume=self._resume)

    def _checkpoint(self) -> None:
        """From now on the checkpointer keeps the answer's text and calls so far (its open
        call's calls, without a thread)."""
        if self.view is not None:
            stored = self.plan.stored
            self._lease.checkpoint(self.view.message_id, lambda: stored.content,
                                   self._calls_so_far, lambda: stored.reasoning)
        elif self.open_call is not None:
            self._lease.checkpoint_call(self.open_call, self._calls_so_far)

    async def _prepare(self) -> None:
        """The observers' stages, then the prompt they shaped."""
        self.handlers = self.plan.handlers()
        self._loop.handlers = self.handlers
        for handler in self.handlers:
            await handler.before_main(self.draft)
        with self.draft.recorder.stage("context"):
            self._prompt = self.plan.messages(self.draft)

    async def _open_chunks(self) -> AsyncGenerator[ChunkT, None]:
        """The main call sent (to the next model of the list while one fails before
        answering); its chunks, once a model server has answered."""
        self._call_started = utcnow()
        try:
            self._stream = await self.calls.open(self._send, self._prompt)
        finally:
            self._call_started = self.calls.started_at
        self._lease.upstream_answered()
        return self._stream.read(self.plan.parse)

    async def _send(self, client: UpstreamClient, messages: Messages) -> UpstreamStream:
        return await client.open_stream(messages, self.plan.params)

    async def _resume(self, exc: UpstreamError) -> AsyncGenerator[ChunkT, None] | None:
        """The answer broke off mid-answer: the call that finishes it, if any."""
        if self._stream is not None:
            await self._stream.close()
        following = await self.calls.resume(exc, self.plan.answer.said(), self._send,
                                            self._main_call)
        if following is None:
            return None
        self._stream, self._call_started = following, self.calls.started_at
        self._prompt = [dict(m) for m in self.calls.messages]
        return following.read(self.plan.parse)

    def _calls_so_far(self) -> list[CallRecord]:
        """The checkpoint's calls (app.turn.holds.checkpoints): those made, and once the request
        was sent the main call measured until now, so a crash keeps their usage."""
        calls = list(self.draft.recorder.calls)
        if self._prompt:
            calls.append(self._main_call())
        return calls

    def _main_call(self) -> CallRecord:
        """The main call as measured until now (its request was sent)."""
        return self.plan.record(
            self.calls.context(), prompt=self._prompt, started_at=self._call_started,
            first_token_at=self.draft.recorder.first_token_at, finished_at=utcnow())

    async def finish(self) -> None:
        """Close the upstream, record the main call (when its request was made, whatever
        its end), store the message with its status and usage (or bill the calls of an
        answer without a thread), exactly once. The ids are bound here too: a response may
        finish a run whose stream never ran (the client left first)."""
        if self.finishing:
            return
        self.finishing = True
        try:
            await self._finish()
        finally:
            self.deps.running.discard(self)

    async def _finish(self) -> None:
        with structlog.contextvars.bound_contextvars(**self.log_ids):
            await self._lease.close_and_give_back(self._stream)
            if self._prompt:
                self.draft.recorder.add_call(self._main_call())
            model = self.calls.spec.model_id
            message_id = self.view.message_id if self.view else uuid.uuid4()
            finished = finished_message(message_id, self.plan.stored, self.draft.recorder,
                                        model=model, stopped_by=self.stopped_by)
            finished.metadata["answered_by"] = self.calls.answered_by()
            finished.metadata["model_name"] = self.calls.chain[0].name  # the name picked
            finished.metadata.update(self.plan.metadata())
            outcome = outcome_of(self.plan.stored, self.draft.recorder, model=model)
            self.store_result = await self._store(finished, outcome)
            self.plan.finished(finished, outcome, self.store_result)

    async def _store(self, finished: FinishedMessage, outcome: TurnOutcome) -> StoreResult:
        """In a thread, the finishing transaction (app.turn.run.persist); without one, the
        bill. Returns the inline result; `_settle` hears the final one."""
        if self.view is None:
            result: StoreResult = "stored" if await self._bill() else "failed"
            await self._settle(result, finished, outcome)
            return result
        store = TurnStore(self.deps.db, self.deps.rows, self.user_id, self.handlers)
        return await store.store_then(
            finished, outcome, lambda result: self._settle(result, finished, outcome))

    async def _settle(self, result: StoreResult, finished: FinishedMessage,
                      outcome: TurnOutcome) -> None:
        """The message's fate is known: the observers' hooks after the store, then the
        adapter's."""
        self.store_result = result
        await after_finish_all(self.handlers, finished, outcome, stored=result == "stored")
        self.plan.settled(finished, outcome, result)

    async def _bill(self) -> bool:
        """The calls of an answer without a thread, and its open call deleted with them."""
        calls = self.draft.recorder.calls
        for attempt in range(1, USAGE_ATTEMPTS + 1):
            try:
                await self.deps.rows.bill(self.user_id, calls, self.open_call)
                return True
            except Exception as exc:
                self.plan.log.exception(f"{self.plan.kind}_usage_failed",
                                        error=type(exc).__name__, attempt=attempt)
                if attempt < USAGE_ATTEMPTS:
                    await asyncio.sleep(USAGE_RETRY_PAUSE_S * attempt)
        self.plan.log.error(f"{self.plan.kind}_usage_lost", calls=len(calls))
        return False


class RunAdapter:
    """What an API's adapter (app.turn.native.turn, app.turn.run.completion) passes on of its run as
    it is: whether it is finishing, why it is stopped, and its finish."""

    run: AnswerRun[Any, Any]

    @property
    def finishing(self) -> bool:
        """finish() has started: the answer is ending, whatever else happens now."""
        return self.run.finishing

    @property
    def stopped_by(self) -> str | None:
        return self.run.stopped_by

    def stopping(self, reason: str) -> None:
        """Whatever ends the answer before its end says why first
        (app.answer.interruptions): stored, an `interrupted` row says so. The first reason
        stays."""
        self.run.stopping(reason)

    def ends_with(self, driver: Callable[[str], None] | None) -> None:
        """`driver` ends the answer when the process ends it (the fence), in its API's
        terms; None: no longer."""
        self.run.ends_with(driver)

    async def finish(self) -> None:
        """The run's finish (idempotent): stored (or billed) with its status and usage,
        exactly once."""
        await self.run.finish()
