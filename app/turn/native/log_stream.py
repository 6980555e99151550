"""A turn's events as a `text/event-stream`, read from the turn's log (app/turn/native/runs.py)
or from a resume source (app/turn/native/resume.py): the opening request and every resume are the
same kind of response, written by app.api.event_stream's FrameResponse (frames encoded
once, coalesced per write). Rendering is app/turn/native/frames.py's `encode`; a
`CatchUp` (the stored message, when the events are no longer kept) is one `catch_up` event.

However the response ends, its reader is closed (shielded), which tells the turn it lost a
reader; a revoked key also stops the turn: at once when it runs here, and the response then
sends the turn's last events before `key_revoked`, so the client has what is stored. The
process shutting down ends the response too: a turn that runs here is stopped and its own
last events (`message_end` with reason `shutting_down`) end it; a turn followed from
another process goes on there, and the response ends with `error` `shutting_down`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping

from starlette.types import Receive, Scope, Send

from app.answer.interruptions import KEY_REVOKED, SHUTTING_DOWN
from app.api.event_stream import FrameResponse, FrameSource, RevocationGuard, ShutdownWatch
from app.api.sse import frame
from app.kit.shield import run_shielded
from app.turn.native.event_log import LogTrimmed
from app.turn.native.frames import encode
from app.turn.native.resume import CatchUp, ResumeStream
from app.turn.native.runs import RunReader

RESUME_EXPIRED = frame("error", {
    "code": "resume_expired",
    "message": "this connection fell too far behind the answer; reload the thread"})


async def _frames(stream: ResumeStream) -> AsyncGenerator[bytes, None]:
    try:
        async for event in stream.events():
            if isinstance(event, CatchUp):
                yield frame("catch_up", {"message": event.message})
            else:
                yield encode(event)
    except LogTrimmed:
        yield RESUME_EXPIRED


class LogFrames:
    """A running turn's log as a FrameSource: each delta the turn's task appends wakes the
    writer, which encodes and writes all that is there, with no task in between."""

    def __init__(self, reader: RunReader) -> None:
        self._reader = reader
        self._trimmed = False

    def take(self) -> list[bytes]:
        if self._trimmed:
            return []
        try:
            return [encode(event) for event in self._reader.take()]
        except LogTrimmed:
            self._trimmed = True
            return [RESUME_EXPIRED]

    @property
    def ended(self) -> bool:
        return self._trimmed or self._reader.ended

    def notify(self, waiter: asyncio.Future[None]) -> None:
        self._reader.notify(waiter)


class LogStreamResponse(FrameResponse):
    def __init__(self, stream: ResumeStream, *, ping_s: float, send_timeout_s: float,
                 log_ids: Mapping[str, str] | None = None,
                 revocation: RevocationGuard | None = None,
                 shutdown: ShutdownWatch | None = None) -> None:
        frames: FrameSource | AsyncGenerator[bytes, None] = (
            LogFrames(stream) if isinstance(stream, RunReader) else _frames(stream))
        super().__init__(frames, ping_s=ping_s, send_timeout_s=send_timeout_s,
                         log_ids=log_ids, revocation=revocation,
                         on_revoked=lambda: stream.stop_here(KEY_REVOKED),
                         shutdown=shutdown,
                         on_shutdown=lambda: stream.stop_here(SHUTTING_DOWN))
        self._stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await run_shielded(self._stream.close(stop=KEY_REVOKED if self.revoked else None))
