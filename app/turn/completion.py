"""One OpenAI-style chat completion: the turn shell for a client that brings its own history.

    call = await open_completion(gate, principal, request, thread_id)   # refusals, 404s
    async for delta in call.deltas(): ...                                # ChoiceDelta
    await call.finish()                                                  # always; idempotent
    call.closing                                                         # usage, metadata

The text comes from the turn core (app.turns.choices: one AnswerStream, so one MarkerFilter,
per choice), driven by the loop the native turn runs on too (app.turn.loop); the
prompt from app.context.client_history (the native MSG_CONTEXT builder). The limits are the
native turn's (TurnGate.admit: rate limit, upstream slot, stream cap, budget). The upstream
request is sent before `open_completion` returns, so a refused or unreachable model server
is an HTTP status, not a broken stream.

With a thread, the exchange is stored like a native turn (the last user message, a
`streaming` assistant row, the observers' hooks, TurnStore's finish); without one, only the
call is recorded: one llm_calls row with no message, and the rollup of the key's user."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import structlog

from app.catalog import ModelNotOffered, choose
from app.clock import utcnow
from app.context.builder import ContextItem
from app.context.client_history import (
    ClientItem,
    content_text,
    flat_prompt,
    last_user_index,
    upstream_messages,
    upstream_params,
)
from app.keys.service import Principal
from app.kit.shield import run_shielded
from app.logging import get_logger
from app.records import CallRecord, FinishedMessage
from app.sanitize import SanitizeReport, clean_json
from app.stream import JsonObject
from app.turn.deps import TurnDeps
from app.turn.gate import TurnGate, UserGuard
from app.turn.lease import TurnLease
from app.turn.loop import TurnLoop
from app.turn.metrics_observer import turn_metrics
from app.turn.model_calls import Messages, ModelCalls
from app.turn.observers import ContextDraft, TurnHandler, TurnView, after_finish_all
from app.turn.opening import open_call_row, open_rows, opening_request
from app.turn.persist import TurnStore
from app.turns.choices import ChoiceChunk, ChoiceDelta, ChoiceSet
from app.turns.events import TurnFailure
from app.turns.finish import TurnOutcome, finished_message, outcome_of
from app.upstream import UpstreamClient, UpstreamError
from app.upstream.choices import ChoiceStream, open_choice_stream

log = get_logger("services.completions")

#: Attempts at recording a thread-less call's usage (the finish transaction's retries are
#: TurnStore's; a call without a message has only this one row set to write).
USAGE_ATTEMPTS, USAGE_RETRY_PAUSE_S = 3, 0.2


class ModelNotFound(Exception):
    """The request names a model the gateway does not offer."""


class CompletionFailed(Exception):
    """The model server refused or could not be reached before any answer came."""

    def __init__(self, failure: TurnFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


@dataclass(frozen=True)
class CompletionRequest:
    """A checked request: the model, the client's messages, how many choices, and every
    other field to pass upstream as it came (tools, temperature, unknown ones)."""

    model: str
    messages: list[dict[str, Any]]
    n: int = 1
    params: dict[str, Any] = field(default_factory=dict)
    #: When each of the first messages was stored: a history read from a thread (a
    #: Responses continuation) keeps the times a thread's history shows the model.
    times: tuple[dt.datetime | None, ...] = ()


@dataclass
class Closing:
    """What closes the reply once the call is over and recorded."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    usage_source: str = "partial"
    metadata: list[JsonObject | None] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    failure: TurnFailure | None = None
    thread_id: uuid.UUID | None = None
    message_id: uuid.UUID | None = None
    stored: bool = False
    #: The main call's output tokens spent on reasoning (part of completion_tokens), None
    #: when the provider said nothing: chat completions then leave out
    #: `completion_tokens_details`, the Responses API says 0.
    reasoning_tokens: int | None = None


def offered_models(deps: TurnDeps) -> list[str]:
    return deps.models.catalog.listed


async def open_completion(
    gate: TurnGate, principal: Principal, request: CompletionRequest,
    thread_id: uuid.UUID | None,
) -> CompletionCall:
    """Raises ModelNotFound, ModelNotAllowed, TurnRefused, ThreadNotFound, ThreadBusy,
    ContentTooLong, or CompletionFailed (the call is recorded all the same)."""
    deps = gate.deps
    try:
        choose(deps.models.catalog, request.model, None, principal.allowed_models)
    except ModelNotOffered as exc:
        raise ModelNotFound(request.model) from exc
    async def opener() -> CompletionCall:
        lease = await TurnLease.take(deps.slots, deps.checkpoints, deps.precedence,
                                     deps.openings)
        guard = gate.user_guard(principal)
        try:
            opened = await _open(deps, principal.user_id, request, thread_id, guard)
        except BaseException:
            lease.give_back()
            raise
        if isinstance(opened, TurnView):
            handlers = [h for o in deps.observers if (h := o.open(opened))]
            return CompletionCall(deps, request, principal.user_id, lease, opened, handlers)
        return CompletionCall(deps, request, principal.user_id, lease, None,
                              [turn_metrics(gate.metrics)], open_call=opened)

    call = await gate.admit(principal, opener)
    await call.start()
    return call


async def _open(deps: TurnDeps, user_id: str, request: CompletionRequest,
                thread_id: uuid.UUID | None, guard: UserGuard) -> TurnView | uuid.UUID:
    """Without a thread, the call's open call (its id), stored under the user's limits;
    with one, the turn's rows through the turn's one opening, which checks the same
    limits."""
    if thread_id is None:
        return await open_call_row(deps, user_id, guard)
    last = last_user_index(request.messages)
    # a tool round continues an exchange whose question is stored: the answer's row alone
    tool_round = last != len(request.messages) - 1
    text = content_text(request.messages[last]["content"]) if last is not None else ""
    opened = await open_rows(deps, opening_request(
        deps, user_id, thread_id, None if tool_round else text, history_limit=0,
        admit=guard), admit=guard)
    thread, user, assistant = opened.thread, opened.user, opened.assistant
    times = list(request.times) + [None] * len(request.messages)
    history = tuple(
        ClientItem(str(m.get("role")), content_text(m.get("content")), assistant.created_at)
        if (at := times[i]) is None else ContextItem(str(m.get("role")),
                                                     content_text(m.get("content")), at)
        for i, m in enumerate(request.messages[:last or 0]))
    return TurnView(
        user_id=user_id, thread_id=thread.id, message_id=assistant.id,
        user_message_id=user.id if user else assistant.id, user_text=text,
        user_message_at=user.created_at if user else assistant.created_at,
        synthetic=False, hidden=user is None, thread_title=thread.title,
        thread_summary=thread.summary, history=history, thread_autonomy=thread.autonomy)


class CompletionCall:
    """One call between open and finish."""

    def __init__(self, deps: TurnDeps, request: CompletionRequest, user_id: str,
                 lease: TurnLease, view: TurnView | None,
                 handlers: list[TurnHandler], *, open_call: uuid.UUID | None = None) -> None:
        self.deps, self.request, self.user_id, self.view = deps, request, user_id, view
        #: Without a thread: the call's open call, among the user's streams until billed.
        self.open_call = open_call
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(utcnow().timestamp())
        # raw chunks only for a stored stream's trace (the tracer observes thread turns)
        reasoning_format, reasoning_tag = deps.reasoning(request.model)
        tool_format, tool_tag = deps.tool_calls(request.model)
        self.choices = ChoiceSet(request.n, keep_raw=view is not None
                                 and deps.settings.trace_streams != "off",
                                 reasoning_format=reasoning_format, reasoning_tag=reasoning_tag,
                                 tool_format=tool_format, tool_tag=tool_tag,
                                 tools_offered=bool(request.params.get("tools")))
        self.draft = ContextDraft(summary=view.thread_summary if view else None)
        self.closing = Closing(thread_id=view.thread_id if view else None,
                               message_id=view.message_id if view else None)
        self.log_ids = {"user_id": user_id, "completion_id": self.id,
                        **({"thread_id": str(view.thread_id),
                            "message_id": str(view.message_id)} if view else {})}
        self._lease = lease
        self._handlers = handlers
        self._prompt: list[dict[str, Any]] = []
        self._stream: ChoiceStream | None = None
        self._started = utcnow()
        self._finishing = False
        #: Why the call is being ended before its answer's end, if it is (`stopping`).
        self.stopped_by: str | None = None
        self._loop: TurnLoop[ChoiceChunk, list[ChoiceDelta]] = TurnLoop(
            self.choices, lease, self.draft.recorder, log=log, name="completion",
            finish=self.finish)
        self._loop.handlers = handlers
        #: What the model server gets besides the messages, its text escaped.
        self.params = upstream_params(request.params)
        self.calls = ModelCalls(deps, request.model, self.draft.recorder, params=self.params)

    def stopping(self, reason: str) -> None:
        """Whatever ends the call before its answer's end says why first
        (app.turns.interruptions): stored in a thread, an `interrupted` row says so. The
        first reason stays."""
        if self.stopped_by is None:
            self.stopped_by = reason

    async def start(self) -> None:
        """The observers' stages, then the upstream request. Raises CompletionFailed after
        finishing the call when the model server fails before answering."""
        structlog.contextvars.bind_contextvars(**self.log_ids)
        try:
            if self.view is not None:
                self._lease.checkpoint(self.view.message_id, lambda: self.choices.first.content,
                                       self._calls_so_far, lambda: self.choices.first.reasoning)
            elif self.open_call is not None:
                self._lease.checkpoint_call(self.open_call, self._calls_so_far)
            for handler in self._handlers:
                await handler.before_main(self.draft)
            settings = self.deps.settings
            with self.draft.recorder.stage("context"):
                self._prompt = upstream_messages(
                    self.request.messages, system_prompt=settings.system_prompt,
                    budget_chars=settings.context_budget_chars, summary=self.draft.summary,
                    memories=self.draft.memories, times=self.request.times)
            self._started = utcnow()
            try:
                self._stream = await self.calls.open(self._send, self._prompt)
            finally:
                self._started = self.calls.started_at
            self._lease.upstream_answered()
        except UpstreamError as exc:
            failure = TurnFailure(exc.code, exc.message, exc.http_status, exc.retry_after_s)
            self.choices.fail(failure, flush=False)
            await run_shielded(self.finish())
            raise CompletionFailed(failure) from exc
        except BaseException:
            self.choices.fail(TurnFailure("internal_error", "the gateway failed"), flush=False)
            await run_shielded(self.finish())
            raise

    async def deltas(self) -> AsyncGenerator[ChoiceDelta, None]:
        """Every choice's deltas in order, then the finishes (or, on a failure, the text the
        filters held; `closing.failure` says why). Closing this iterator interrupts the
        call; it is recorded either way (the loop's finish, app.turn.loop)."""
        assert self._stream is not None, "start() first"
        structlog.contextvars.bind_contextvars(**self.log_ids)
        async with aclosing(self._loop.run(self._chunks, resume=self._resume)) as batches:
            async for batch in batches:
                for delta in batch:
                    yield delta

    async def _chunks(self) -> AsyncGenerator[ChoiceChunk, None]:
        """The chunks of the stream start() opened."""
        assert self._stream is not None
        return self._stream.choice_chunks()

    async def _send(self, client: UpstreamClient, messages: Messages) -> ChoiceStream:
        return await open_choice_stream(client, messages, self.params)

    async def _resume(self, exc: UpstreamError) -> AsyncGenerator[ChoiceChunk, None] | None:
        """The answer broke off mid-answer: the call that finishes it, if any."""
        if self._stream is not None:
            await self._stream.close()
        following = await self.calls.resume(exc, self.choices.said(), self._send,
                                            self._main_call)
        if following is None:
            return None
        self._stream, self._started = following, self.calls.started_at
        self._prompt = [dict(m) for m in self.calls.messages]
        return following.choice_chunks()

    async def run_to_end(self) -> list[ChoiceDelta]:
        """Every delta of the call, for a whole (non-streamed) reply; finished either way."""
        try:
            return [delta async for delta in self.deltas()]
        finally:
            await run_shielded(self.finish())

    def _calls_so_far(self) -> list[CallRecord]:
        """The checkpoint's calls (app.turn.checkpoints): those made, and once the request
        was sent the main call measured until now, so a crash keeps their usage."""
        calls = list(self.draft.recorder.calls)
        if self._prompt:
            calls.append(self._main_call())
        return calls

    def _main_call(self) -> CallRecord:
        """The main call as measured until now (its request was sent)."""
        ctx = self.calls.context()
        return self.choices.call_record(
            ctx, prompt=flat_prompt(self._prompt), started_at=self._started,
            first_token_at=self.draft.recorder.first_token_at, finished_at=utcnow())

    async def finish(self) -> None:
        """Close the upstream, record the call (and store the message, with a thread),
        exactly once."""
        if self._finishing:
            return
        self._finishing = True
        with structlog.contextvars.bound_contextvars(**self.log_ids):
            await self._lease.close_and_give_back(self._stream)
            if self._prompt:
                self.draft.recorder.add_call(self._main_call())
            self._close_figures()
            await self._store()
            log.info("completion_finished", status=self.choices.status,
                     stored=self.closing.stored, choices=len(self.choices.choices),
                     tokens=self.closing.prompt_tokens + self.closing.completion_tokens,
                     warnings=self.closing.warnings,
                     error=self.closing.failure.code if self.closing.failure else None)

    def _close_figures(self) -> None:
        main = self.draft.recorder.main_call()
        closing = self.closing
        if main is not None:
            closing.prompt_tokens, closing.completion_tokens = (main.prompt_tokens,
                                                                main.completion_tokens)
            closing.cost_usd, closing.usage_source = main.cost_usd, main.usage_source
            closing.reasoning_tokens = main.reasoning_tokens
        ordered = [self.choices.choices[i] for i in sorted(self.choices.choices)]
        # Cleaned as the store cleans response_metadata: what the client gets is what is kept.
        closing.metadata = [clean_json(dict(md), SanitizeReport()) if md else None
                            for md in (choice.answer.metadata for choice in ordered)]
        closing.warnings = [name for choice in ordered for name in choice.answer.warning_names]
        closing.failure = self.choices.first.failure

    async def _record_usage(self) -> bool:
        calls = self.draft.recorder.calls
        for attempt in range(1, USAGE_ATTEMPTS + 1):
            try:
                await self.deps.rows.bill(self.user_id, calls, self.open_call)
                return True
            except Exception as exc:
                log.exception("completion_usage_failed", error=type(exc).__name__,
                              attempt=attempt)
                if attempt < USAGE_ATTEMPTS:
                    await asyncio.sleep(USAGE_RETRY_PAUSE_S * attempt)
        log.error("completion_usage_lost", calls=len(calls))
        return False

    async def _store(self) -> None:
        """With a thread, the finishing transaction of a turn; without, the usage alone."""
        recorder, answer = self.draft.recorder, self.choices.first
        message_id = self.view.message_id if self.view else uuid.uuid4()
        model = self.calls.spec.model_id
        finished = finished_message(message_id, answer, recorder, model=model,
                                    stopped_by=self.stopped_by)
        finished.metadata["answered_by"] = self.calls.answered_by()
        if tool_calls := self.choices.choices[0].tool_calls:
            finished.metadata["tool_calls"] = tool_calls  # an answer may be only a tool call
        outcome = outcome_of(answer, recorder, model=model)
        if self.view is None:
            self.closing.stored = await self._record_usage()
            await self._settle(finished, outcome, stored=self.closing.stored)
            return
        store = TurnStore(self.deps.db, self.deps.rows, self.user_id, self._handlers)
        result = await store.store_then(
            finished, outcome,
            lambda result: self._settle(finished, outcome, stored=result == "stored"))
        self.closing.stored = result == "stored"

    async def _settle(self, finished: FinishedMessage, outcome: TurnOutcome, *,
                      stored: bool) -> None:
        await after_finish_all(self._handlers, finished, outcome, stored=stored)

def pass_through(body: Mapping[str, Any]) -> dict[str, Any]:
    """The fields sent upstream as they came: all but those the gateway sets itself."""
    return {k: v for k, v in body.items()
            if k not in {"messages", "model", "stream", "stream_options"}}
