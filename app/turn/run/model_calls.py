"""A turn's main call across the catalog's models, for the native turn and the OpenAI-style
call alike: the model list tried in order before the first token (each failed try its own
`llm_calls` row), and the continuation of an answer whose server failed mid-answer.

    calls = ModelCalls(deps, "smart", recorder)
    stream = await calls.open(send, prompt)          # UpstreamError when every model failed
    ...                                              # a mid-answer failure:
    following = await calls.resume(exc, said, send, first_call)   # or None
    calls.context()                                  # what the answering call is priced by
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from app.answer.call_usage import CallContext, attempt_record
from app.answer.continuation import continuable, continuation_messages
from app.answer.recorder import TurnRecorder
from app.answer.records import CallRecord
from app.config.catalog import ModelSpec
from app.core.clock import utcnow
from app.turn.deps import TurnDeps
from app.turn.holds.allowance import current_allowance
from app.upstream import UpstreamClient, UpstreamError
from app.upstream.router import Attempt

S = TypeVar("S")
#: The pause before a model is asked to finish the answer it broke off itself (no other
#: model in its list, or all of them cooling down): a server that just dropped a stream
#: often drops the next one at once.
SAME_MODEL_BACKOFF_S = 0.5
Messages = Sequence[Mapping[str, Any]]
#: Sends the request to one model's client: the shell's own kind of stream.
Send = Callable[[UpstreamClient, Messages], Awaitable[S]]


class ModelCalls:
    """The chosen model's list and which of it is answering now."""

    def __init__(self, deps: TurnDeps, model: str, recorder: TurnRecorder, *,
                 params: Mapping[str, Any] | None = None) -> None:
        self._router = deps.models
        self._prices = deps.prices
        self._recorder = recorder
        self._params = dict(params or {})
        self.chain = self._router.catalog.chain(model)
        #: The model answering (or the last one asked when none did).
        self.spec: ModelSpec = self.chain[0]
        #: The messages of the answering call (the continuation's own after one).
        self.messages: Messages = ()
        self.started_at = utcnow()
        #: Calls that may still finish this answer after a mid-answer failure.
        self.continuations_left = deps.settings.max_continuations
        #: The most tokens an answer may run to: what the key's daily budget had left when
        #: the turn was admitted (app.turn.holds.allowance); None: the model's own limit.
        self.token_limit = current_allowance()

    def context(self, spec: ModelSpec | None = None) -> CallContext:
        """What a call to `spec` (default: the answering model) is recorded and priced by."""
        spec = spec or self.spec
        client = self._held(self._router.client(spec.name))
        request = {**client.request_params(), **self._params}
        if self.token_limit is not None:
            for key in ("max_tokens", "max_completion_tokens"):
                if isinstance(request.get(key), int) and request[key] > self.token_limit:
                    request[key] = self.token_limit
        return CallContext(spec.model_id, request, self._prices, server=spec.server.name)

    def _held(self, client: UpstreamClient) -> UpstreamClient:
        """The client as this turn may use it: held to its token limit, if it has one."""
        return client if self.token_limit is None else client.limited(self.token_limit)

    def answered_by(self) -> dict[str, str]:
        """What the stored answer says of the model that gave it."""
        return {"model": self.spec.name, "server": self.spec.server.name}

    async def open(self, send: Send[S], messages: Messages) -> S:
        """The request to each model of the list until one answers. Every failed try but
        the last is recorded here; the last one, when none answered, is the turn's main
        call (recorded by its finish)."""
        attempts: list[Attempt] = []
        self.started_at = utcnow()
        try:
            self.spec, stream = await self._router.open(
                self.chain, lambda client: send(self._held(client), messages), attempts)
        except UpstreamError:
            if attempts:
                self.spec = attempts[-1].spec
            self._record(attempts[:-1])
            raise
        self._record(attempts)
        if attempts:
            self.started_at = attempts[-1].finished_at
        self.messages = messages
        return stream

    async def resume(self, exc: UpstreamError, said: str, send: Send[S],
                     failed_call: Callable[[], CallRecord]) -> S | None:
        """After a mid-answer failure of the answering model, the call that finishes the
        answer, or None when its model does not continue answers, the failure is not one to
        continue after, or the answer had its continuations (the failure is counted against
        the server all the same). `failed_call` is the failed call's record (the answer's state
        is still that call's); it is recorded once another call answers. When none does,
        the tries are recorded and the failure raised: the finish records the failed call."""
        failed = self.spec
        self._router.failed(failed, exc)  # counted against its server, continued or not
        if (self.continuations_left <= 0 or not failed.continuation
                or not continuable(exc.code, exc.http_status)):
            return None
        first = failed_call()
        messages = continuation_messages(self.messages, said)
        chain = self._router.continuation_chain(self.chain, failed)
        if chain[0] == failed:  # no other model: the same one, after a pause
            await asyncio.sleep(SAME_MODEL_BACKOFF_S)
        attempts: list[Attempt] = []
        started = utcnow()
        try:
            spec, stream = await self._router.open(
                chain, lambda client: send(self._held(client), messages), attempts,
                continuing=failed)
        except UpstreamError:
            self._record(attempts)
            raise
        self._recorder.add_call(first)
        self._record(attempts)
        self.spec, self.messages = spec, messages
        self.continuations_left -= 1
        self.started_at = attempts[-1].finished_at if attempts else started
        return stream

    def _record(self, attempts: Sequence[Attempt]) -> None:
        for attempt in attempts:
            self._recorder.add_call(attempt_record(
                self.context(attempt.spec), started_at=attempt.started_at,
                finished_at=attempt.finished_at, code=attempt.error.code,
                message=attempt.error.message))
