"""One OpenAI-style chat completion: the adapter over the answer run (app.turn.run) for a
client that brings its own history.

    call = await open_completion(gate, principal, request, thread_id)   # refusals, 404s
    async for delta in call.deltas(): ...                                # ChoiceDelta
    await call.finish()                                                  # always; idempotent
    call.closing                                                         # usage, metadata

The text comes from the turn core (app.answer.choices: one AnswerStream, so one MarkerFilter,
per choice), run by the same AnswerRun as the native turn (app.turn.run); the
prompt from app.context.client_history (the native MSG_CONTEXT builder). The limits are the
native turn's (TurnGate.admit: rate limit, upstream slot, stream cap, budget). The upstream
request is sent before `open_completion` returns, so a refused or unreachable model server
is an HTTP status, not a broken stream.

With a thread, the exchange is stored like a native turn (the last user message, a
`streaming` assistant row, the observers' hooks, TurnStore's finish); without one, only the
call is recorded: one llm_calls row with no message, and the rollup of the key's user."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from app.answer.call_usage import CallContext
from app.answer.choices import ChoiceChunk, ChoiceDelta, ChoiceSet
from app.answer.events import TurnFailure
from app.answer.finish import StoreResult, TurnOutcome
from app.answer.records import CallRecord, FinishedMessage
from app.config.catalog import ModelNotOffered, choose
from app.context.builder import ContextItem
from app.context.client_history import (
    ClientItem,
    content_text,
    flat_prompt,
    last_user_index,
    upstream_messages,
    upstream_params,
)
from app.core.cleaning import SanitizeReport, clean_json
from app.core.clock import utcnow
from app.keys.service import Principal
from app.kit.shield import run_shielded
from app.observe.logging import get_logger
from app.stream import JsonObject
from app.turn.admission.gate import TurnGate, UserGuard
from app.turn.admission.opening import leased, open_call_row, open_rows, opening_request
from app.turn.deps import TurnDeps
from app.turn.holds.lease import TurnLease
from app.turn.observers.seam import ContextDraft, TurnHandler, TurnView
from app.turn.observers.turn_metrics import turn_metrics
from app.turn.rows import Fork
from app.turn.run.answer_run import AnswerPlan, AnswerRun, RunAdapter, observed
from app.upstream import UpstreamError
from app.upstream.wire import parse_choice_chunk

log = get_logger("services.completions")


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
    #: The stored answer a Responses continuation goes on from: its rows follow that answer
    #: in the thread's tree (app.turn.rows.Fork), whichever branch the thread shows.
    follows: uuid.UUID | None = None


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
        guard = gate.user_guard(principal)
        lease, opened = await leased(
            deps, lambda: _open(deps, principal.user_id, request, thread_id, guard))
        if isinstance(opened, TurnView):
            return CompletionCall(deps, request, principal.user_id, lease, opened)
        return CompletionCall(deps, request, principal.user_id, lease, None, open_call=opened,
                              handlers=lambda: [turn_metrics(gate.metrics)])

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
    fork = Fork(request.follows) if request.follows is not None else None
    opened = await open_rows(deps, opening_request(
        deps, user_id, thread_id, None if tool_round else text, history_limit=0,
        admit=guard, fork=fork), admit=guard)
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


class CompletionCall(RunAdapter):
    """One call between open and finish: its answer's state is a ChoiceSet, its output
    choice deltas; the run (app.turn.run) does the rest. `handlers`: the observers of a
    call without a thread (one in a thread has the thread's)."""

    def __init__(self, deps: TurnDeps, request: CompletionRequest, user_id: str,
                 lease: TurnLease, view: TurnView | None, *, open_call: uuid.UUID | None = None,
                 handlers: Callable[[], list[TurnHandler]] = list) -> None:
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
        self.closing = Closing(thread_id=view.thread_id if view else None,
                               message_id=view.message_id if view else None)
        self.log_ids = {"user_id": user_id, "completion_id": self.id,
                        **({"thread_id": str(view.thread_id),
                            "message_id": str(view.message_id)} if view else {})}
        #: What the model server gets besides the messages, its text escaped.
        self.params = upstream_params(request.params)
        plan: AnswerPlan[ChoiceChunk, list[ChoiceDelta]] = AnswerPlan(
            answer=self.choices, stored=self.choices.first, parse=parse_choice_chunk,
            record=self._record, messages=self._messages,
            handlers=(lambda: observed(deps, view)) if view is not None else handlers,
            kind="completion", log=log, params=self.params, metadata=self._tool_calls,
            finished=self._finished)
        self.run = AnswerRun(deps, plan, lease, user_id=user_id, model=request.model,
                             log_ids=self.log_ids, view=view, open_call=open_call)

    async def start(self) -> None:
        """The run's stages, then the upstream request. Raises CompletionFailed after
        finishing the call when the model server fails before answering."""
        try:
            await self.run.start()
        except UpstreamError as exc:
            failure = self.choices.first.failure
            assert failure is not None, "a failed start fails the answer"
            raise CompletionFailed(failure) from exc

    async def deltas(self) -> AsyncGenerator[ChoiceDelta, None]:
        """Every choice's deltas in order, then the finishes (or, on a failure, the text the
        filters held; `closing.failure` says why). Closing this iterator interrupts the
        call; it is recorded either way (the loop's finish, app.turn.run.loop)."""
        async with aclosing(self.run.stream()) as batches:
            async for batch in batches:
                for delta in batch:
                    yield delta

    async def run_to_end(self) -> list[ChoiceDelta]:
        """Every delta of the call, for a whole (non-streamed) reply; finished either way."""
        try:
            return [delta async for delta in self.deltas()]
        finally:
            await run_shielded(self.finish())

    def _messages(self, draft: ContextDraft) -> list[dict[str, Any]]:
        settings = self.deps.settings
        return upstream_messages(
            self.request.messages, system_prompt=settings.system_prompt,
            budget_chars=settings.context_budget_chars, summary=draft.summary,
            memories=draft.memories, times=self.request.times)

    def _record(self, ctx: CallContext, *, prompt: Sequence[Mapping[str, Any]],
                started_at: dt.datetime, first_token_at: dt.datetime | None,
                finished_at: dt.datetime) -> CallRecord:
        return self.choices.call_record(ctx, prompt=flat_prompt(prompt), started_at=started_at,
                                        first_token_at=first_token_at, finished_at=finished_at)

    def _tool_calls(self) -> dict[str, Any]:
        """An answer may be only a tool call: the stored message keeps its calls."""
        tool_calls = self.choices.choices[0].tool_calls
        return {"tool_calls": tool_calls} if tool_calls else {}

    def _finished(self, finished: FinishedMessage, outcome: TurnOutcome,
                  result: StoreResult) -> None:
        """The closing figures, then the call's one summary line."""
        self._close_figures()
        self.closing.stored = result == "stored"
        log.info("completion_finished", status=self.choices.status,
                 stored=self.closing.stored, choices=len(self.choices.choices),
                 tokens=self.closing.prompt_tokens + self.closing.completion_tokens,
                 warnings=self.closing.warnings,
                 error=self.closing.failure.code if self.closing.failure else None)

    def _close_figures(self) -> None:
        main = self.run.draft.recorder.main_call()
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

def pass_through(body: Mapping[str, Any]) -> dict[str, Any]:
    """The fields sent upstream as they came: all but those the gateway sets itself."""
    return {k: v for k, v in body.items()
            if k not in {"messages", "model", "stream", "stream_options"}}
