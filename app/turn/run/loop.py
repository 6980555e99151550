"""The one loop that drives an answer's stream, run by the answer run (app.turn.run) for
every API: the native turn's core AnswerStream and the OpenAI-compatible call's ChoiceSet
(the choices of that same core) alike:

    loop = TurnLoop(answer, lease, recorder, log=log, name="turn", finish=run.finish)
    async for out in loop.run(open_chunks, first=..., prepare=..., stage="llm_calls"): ...

It reads the upstream chunks, marks the first token, feeds each chunk to the answer state,
reports its filter warnings to the handlers, tells the lease when something was sent and
waits while it holds the stream, flushes what the filters hold at the end or on a failure,
and runs the finish shielded however the stream ended. The run keeps the rest: how the
upstream is opened and continued, and the finish itself.

The loop yields what the answer state returns (a Delta, a list of ChoiceDelta) as it comes,
one object per chunk at most, and is inlined in one generator: it adds no await and no
allocation per chunk, and the native turn no generator layer either (the OpenAI-compatible
call spreads its lists in one of its own)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Sequence
from contextlib import aclosing, nullcontext
from typing import Any, Generic, Protocol, TypeVar

import structlog

from app.answer.events import TurnFailure
from app.answer.recorder import TurnRecorder
from app.kit.shield import run_shielded
from app.stream import FilterWarning
from app.turn.holds.lease import TurnLease
from app.turn.observers.seam import TurnHandler, report_warnings
from app.upstream import UpstreamError


class WithText(Protocol):
    """What the loop reads of a chunk itself: its text and its reasoning (the first of either
    marks the first token)."""

    @property
    def text(self) -> str: ...

    @property
    def reasoning(self) -> str: ...


ChunkIn = TypeVar("ChunkIn", contravariant=True)
Out = TypeVar("Out", covariant=True)
ChunkT = TypeVar("ChunkT", bound=WithText)
OutT = TypeVar("OutT")


class AnswerState(Protocol[ChunkIn, Out]):
    """The answer the loop feeds. Each step returns what became safe to show; anything falsy
    (None, an empty list) shows nothing."""

    def feed(self, chunk: ChunkIn) -> Out | None: ...

    def end(self) -> Out | None:
        """The model server finished: what the filters held."""

    def fail(self, failure: TurnFailure, *, flush: bool) -> Out | None:
        """The stream failed; `flush`: it had been opened, so what the filters held is real
        answer text, shown and kept."""

    def take_warnings(self) -> list[FilterWarning]:
        """The filter warnings raised since the last call."""

    def can_continue(self) -> bool:
        """Another call could finish this answer after a mid-answer failure."""

    def said(self) -> str:
        """The clean text said so far (after a failure closed the filters: all of it)."""

    def reopen(self) -> None:
        """A continuation's chunks follow the failure (app.answer.answer.AnswerStream)."""


#: Opens the call that finishes an answer after a mid-answer failure, given the failure
#: (the answer is failed without a flush by then: `said()` is what was shown); None: no
#: continuation.
Resume = Callable[[UpstreamError], Awaitable[AsyncGenerator[ChunkT, None] | None]]

#: What a client is told of a gateway bug; the log has the rest.
INTERNAL_FAILURE = TurnFailure("internal_error", "the gateway failed; see the server log")


class TurnLoop(Generic[ChunkT, OutT]):
    """One answer's stream, from the opening of its upstream to its finish. `handlers` are
    the turn's observers' handlers, set once they are open (they hear the warnings)."""

    def __init__(self, answer: AnswerState[ChunkT, OutT], lease: TurnLease,
                 recorder: TurnRecorder, *, log: structlog.stdlib.BoundLogger, name: str,
                 finish: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self.answer = answer
        self.handlers: Sequence[TurnHandler] = ()
        self._lease, self._recorder, self._finish, self._log = lease, recorder, finish, log
        self._failed_event, self._error_event = f"{name}_failed", f"{name}_error"

    async def run(
        self, open_chunks: Callable[[], Awaitable[AsyncGenerator[ChunkT, None]]], *,
        first: Sequence[OutT] = (), prepare: Callable[[], Awaitable[None]] | None = None,
        stage: str | None = None, resume: Resume[ChunkT] | None = None,
    ) -> AsyncGenerator[OutT, None]:
        """`first`, then `prepare()` (the stages before the upstream call), then within the
        recorder's `stage` the chunks of `open_chunks()` through the answer. An upstream
        failure ends it with what the filters held when the stream was open; a gateway bug
        is logged and shows nothing more. Closing this iterator interrupts the answer; the
        finish runs either way, shielded from cancellation.

        After a mid-answer failure, `resume` may open a call that finishes the answer. What
        was shown is what was said; what the filters still held (a possible marker's start,
        a METADATA block cut in its middle, white space before more text) is not, and the
        new call, asked to go on from what was said, writes it again through fresh filters
        (`reopen`), appended. With no such call, the held text is resolved as at any
        failure."""
        opened = False
        try:
            for event in first:
                yield event
            if prepare is not None:
                await prepare()
            with self._recorder.stage(stage) if stage else nullcontext():
                chunks = await open_chunks()
                opened = True
                answer, lease, mark = self.answer, self._lease, self._recorder.mark_first_token
                while True:
                    try:
                        async with aclosing(chunks):
                            async for chunk in chunks:
                                if chunk.text or chunk.reasoning:
                                    mark()
                                out = answer.feed(chunk)
                                if warnings := answer.take_warnings():
                                    report_warnings(warnings, self.handlers)
                                if out:
                                    yield out
                                    lease.delta_sent()
                                if (held := lease.hold()) is not None:
                                    await held
                        break
                    except UpstreamError as exc:
                        chunks = await self._continuation(exc, resume)
                last = answer.end()
                self._report_warnings()
                if last:
                    yield last
        except UpstreamError as exc:
            if last := self.fail(_failure(exc), flush=opened):
                yield last
        except Exception as exc:
            self._log.exception(self._error_event, error=type(exc).__name__)
            self.fail(INTERNAL_FAILURE, flush=False)
        finally:
            await run_shielded(self._finish())

    async def _continuation(self, exc: UpstreamError, resume: Resume[ChunkT] | None
                            ) -> AsyncGenerator[ChunkT, None]:
        """The chunks of the call that finishes the answer `exc` broke off; raises `exc`
        when there is none. The failed call ends first, for its record, without a flush:
        what its filters hold is not said (the next call writes it again; it is flushed at
        the final failure when no call comes)."""
        if resume is None or not self.answer.can_continue():
            raise exc
        self.answer.fail(_failure(exc), flush=False)
        self._report_warnings()
        following = await resume(exc)
        if following is None:
            raise exc
        self.answer.reopen()
        return following

    def fail(self, failure: TurnFailure, *, flush: bool) -> OutT | None:
        """The answer failed: logged, the answer told, its last warnings reported."""
        self._log.warning(self._failed_event, code=failure.code, error=failure.message)
        last = self.answer.fail(failure, flush=flush)
        self._report_warnings()
        return last

    def _report_warnings(self) -> None:
        if warnings := self.answer.take_warnings():
            report_warnings(warnings, self.handlers)


def _failure(exc: UpstreamError) -> TurnFailure:
    return TurnFailure(exc.code, exc.message, exc.http_status)
