"""How an OpenAI-style call is answered, for chat completions and the Responses API alike:
streamed through CallStreamResponse (which always finishes the call), or whole once it is
over; a revoked key or a shutdown ends either in the API's own frames (`Endings`), and a
failed call is its status. Each endpoint brings its frames and its whole reply."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from app.answer.choices import ChoiceDelta
from app.answer.events import TurnFailure
from app.answer.interruptions import KEY_REVOKED, SHUTTING_DOWN
from app.api.event_stream import (
    FrameResponse,
    RevocationGuard,
    RevokedEnding,
    ShutdownWatch,
)
from app.api.state import runtime
from app.keys.service import Principal
from app.kit.shield import run_detached, run_shielded
from app.turn.openai.errors import (
    OpenAIError,
    database_unreachable,
    failure_error,
    key_revoked,
    shutting_down,
)
from app.turn.run.completion import CompletionCall


@dataclass(frozen=True)
class Endings:
    """How a stream cut by the gateway ends in one API's frames: a revoked key as a failed
    call ends, with OpenAI's `{"error": ...}` (the SDKs raise it; a native `key_revoked`
    event they would take for the answer's end), and a shutdown or a fenced process so
    too, so that the SDKs raise rather than take the cut answer for a whole one (the call
    is stored `interrupted` with what was sent)."""

    revoked: RevokedEnding
    shutting_down: bytes
    database_unreachable: bytes

    @classmethod
    def of(cls, error_frame: Callable[[OpenAIError], bytes]) -> Endings:
        return cls(RevokedEnding(error_frame(key_revoked()), lambda: key_revoked().response()),
                   error_frame(shutting_down()), error_frame(database_unreachable()))


async def answered(
    request: Request, principal: Principal, call: CompletionCall, endings: Endings, *,
    frames: AsyncGenerator[bytes, None] | None,
    whole: Callable[[list[ChoiceDelta]], dict[str, Any]],
    failure: Callable[[TurnFailure], Exception] = failure_error,
) -> Response:
    """The call's answer: its `frames` as an event stream, or (no frames) `whole` of its
    deltas once it is over; a failed whole call raises its status in the API's shape
    (`failure`: OpenAI's unless told)."""
    rt = runtime(request)
    revocation = functools.partial(rt.revocations.stream, principal.key_id)
    if frames is not None:
        return CallStreamResponse(
            call, frames, ping_s=rt.settings.keepalive_s,
            send_timeout_s=rt.settings.sse_send_timeout_s, revoked_ending=endings.revoked,
            shutdown_ending=endings.shutting_down, revocation=revocation,
            shutdown=rt.shutdown.watch, fenced_ending=endings.database_unreachable)
    deltas = await run_whole(call, revocation, rt.shutdown.watch)
    if call.closing.failure is not None:
        raise failure(call.closing.failure)
    return JSONResponse(whole(deltas))


async def run_whole(call: CompletionCall, revocation: RevocationGuard,
                    shutdown: ShutdownWatch) -> list[ChoiceDelta]:
    """Every delta of a non-streamed call; a 401 `key_revoked` once its key is revoked while
    it runs, as a stream ends then, and a 503 `shutting_down` at once when the process
    begins shutting down (a whole reply may take minutes: the server's grace would cut it
    with a bare 500), and a 503 `database_unreachable` at once when the process ends its
    answers (fenced: app.turn.holds.running). Cut or not, the call is finished (stored
    `interrupted` with its reason, and billed for what the model produced); a fenced one's
    finish waits for the database, not this."""
    running = asyncio.ensure_future(call.run_to_end())
    stopped_by: OpenAIError | None = None

    def stop(reason: str, error: OpenAIError) -> None:
        nonlocal stopped_by
        stopped_by = error
        call.stopping(reason)
        running.cancel()

    call.ends_with(lambda reason: stop(reason, database_unreachable()))
    with (revocation(lambda: stop(KEY_REVOKED, key_revoked())),
          shutdown(lambda: stop(SHUTTING_DOWN, shutting_down()))):
        try:
            return await running
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if stopped_by is not None and (current is None or not current.cancelling()):
                raise stopped_by from None
            raise
        finally:
            call.ends_with(None)
            if running.cancelled():  # maybe before it ran: its finish, without waiting
                run_detached(call.finish())


class CallStreamResponse(FrameResponse):
    """A call's frames as an event stream that always finishes the call, even if the client
    left before the first byte (when the frames never started, closing them runs nothing).
    Chat completions and the Responses API stream through it, each with its own frames and
    endings."""

    def __init__(self, call: CompletionCall, frames: AsyncGenerator[bytes, None], *,
                 ping_s: float, send_timeout_s: float, revoked_ending: RevokedEnding,
                 shutdown_ending: bytes, revocation: RevocationGuard | None = None,
                 shutdown: ShutdownWatch | None = None, fenced_ending: bytes) -> None:
        super().__init__(frames, ping_s=ping_s, send_timeout_s=send_timeout_s,
                         log_ids=call.log_ids, revocation=revocation,
                         revoked_ending=revoked_ending, shutdown=shutdown,
                         shutdown_ending=shutdown_ending, on_stop=call.stopping)
        self._call, self._fenced_ending = call, fenced_ending

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The process ending its answers (fenced) cuts the stream as the shutdown does.
        self._call.ends_with(lambda reason: self.cut(reason, self._fenced_ending))
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._call.ends_with(None)
            await run_shielded(self._call.finish())
