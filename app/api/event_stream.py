"""A `text/event-stream` response written straight from encoded frames: the turn's hot path.

Why not sse-starlette here: per event it took an anyio cancel scope for the send timeout, a
lock, and one socket write, beside four tasks per stream; at a hundred events a turn that
was a third of the gateway's CPU. Here the frames a producer task makes while the writer
waits are joined into ONE write (a client or socket slower than the model gets the same
bytes, in the same order, in fewer pieces), the send timeout is one deadline per write, and
the keep-alive ping is one timer per stream that only fires on silence.

Tasks per stream: the response's own (the writer), the disconnect watcher, and, for frames
that come from an async generator, the producer. A `FrameSource` (a running turn's log) is
polled by the writer itself: the turn's task appends an event and wakes the writer, with no
task in between. A revocation is a callback, no task. Any way the stream ends (client gone,
key revoked, the process shutting down, a send that blocks past the timeout, cancellation)
cancels the producer and waits for it, so the source generator's cleanup has run when the
response returns (a FrameSource's owner closes it: app.turn.native.log_stream closes the turn's
reader)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import AbstractContextManager, ExitStack, aclosing
from dataclasses import dataclass
from typing import Protocol

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from app.answer.interruptions import CLIENT_GONE, KEY_REVOKED, SHUTTING_DOWN
from app.api.errors import error_response
from app.observe.logging import get_logger

log = get_logger("api.event_stream")

#: Opens the stream's watch on its API key: while open, the callback given is called once the
#: key is revoked.
RevocationGuard = Callable[[Callable[[], None]], AbstractContextManager[None]]
#: Opens the stream's watch on the process (app.kit.shutdown.Shutdown.watch): while open, the
#: callback given is called once the process begins shutting down.
ShutdownWatch = Callable[[Callable[[], None]], AbstractContextManager[None]]

PING_FRAME = b": ping\n\n"
KEY_REVOKED_FRAME = (b'event: error\ndata: {"code":"key_revoked",'
                     b'"message":"the API key was revoked"}\n\n')
#: The native API's last event of a stream this process cannot end with the answer's own
#: (a turn followed from another process goes on there: a resume reads the rest).
SHUTTING_DOWN_FRAME = (b'event: error\ndata: {"code":"shutting_down","message":"this gateway '
                       b'process is shutting down; resume the stream to read the rest"}\n\n')


@dataclass(frozen=True)
class RevokedEnding:
    """How a stream whose key was revoked ends, in its API's own terms: the last `frame`
    once bytes were sent, else the `refusal` it would have got a moment before."""

    frame: bytes
    refusal: Callable[[], Response]


#: The native API's: an `error` event `key_revoked`, or a 401 `unauthorized`.
NATIVE_REVOKED = RevokedEnding(
    KEY_REVOKED_FRAME, lambda: error_response(401, "unauthorized", "invalid or revoked API key"))
HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"),
           (b"cache-control", b"no-store"), (b"connection", b"keep-alive"),
           (b"x-accel-buffering", b"no")]


class FrameSource(Protocol):
    """Frames the writer polls when it is free to write (all that is ready at once)."""

    def take(self) -> list[bytes]:
        """The frames ready now, maybe none."""
        ...

    @property
    def ended(self) -> bool:
        """Every frame was taken and none follows."""
        ...

    def notify(self, waiter: asyncio.Future[None]) -> None:
        """Resolve `waiter` once take() may return more, or ended turn True."""
        ...


class FrameResponse(Response):
    """Streams `frames` (complete SSE frames as bytes, from an async generator or a
    FrameSource). A client too slow to take one write within `send_timeout_s` is the
    client's problem: logged at INFO with `log_ids`, not raised to the 500 path. With
    `revocation`, the stream ends as if its client had left once its key is revoked, then
    says so in its API's terms (`revoked_ending`; by default the native `error` event
    `key_revoked`). `on_revoked`, called the moment the revocation is seen, may end the
    source at once and say so (True): the frames it still makes are then written before
    that last frame, so that a stopped turn's client has what the turn stores.

    With `shutdown`, the process shutting down ends the stream at once with a last event
    rather than leaving it to the server's cancellation: `on_shutdown` may end the source
    and say so (True; its last frames, the answer's end, close the stream), else the
    source is stopped and `shutdown_ending` is the last frame, after what it made. `cut`
    ends it so for another reason the gateway has (a fenced process ends its answers).

    `on_stop`, when the stream ends before its frames did, is told why
    (app.answer.interruptions: the client gone, the key revoked, the process shutting down)
    before the frames are stopped, so that their cleanup (a call's finish) stores it."""

    def __init__(self, frames: AsyncGenerator[bytes, None] | FrameSource, *, ping_s: float,
                 send_timeout_s: float, log_ids: Mapping[str, str] | None = None,
                 revocation: RevocationGuard | None = None,
                 on_revoked: Callable[[], bool] | None = None,
                 revoked_ending: RevokedEnding = NATIVE_REVOKED,
                 shutdown: ShutdownWatch | None = None,
                 on_shutdown: Callable[[], bool] | None = None,
                 shutdown_ending: bytes = SHUTTING_DOWN_FRAME,
                 on_stop: Callable[[str], None] | None = None) -> None:
        self.status_code, self.background, self.raw_headers = 200, None, list(HEADERS)
        # A generator is told apart by its ABC, a cached check: an isinstance of a runtime
        # Protocol looks up each of its members, 12 us a call.
        self._source: FrameSource | None = None
        self._frames: AsyncGenerator[bytes, None] | None = None
        if isinstance(frames, AsyncGenerator):
            self._frames = frames
        else:
            self._source = frames
        self._ping_s, self._send_timeout_s = ping_s, send_timeout_s
        self._log_ids = dict(log_ids or {})
        self._revocation, self._on_revoked = revocation, on_revoked
        self._revoked_ending = revoked_ending
        self._shutdown, self._on_shutdown = shutdown, on_shutdown
        self._shutdown_ending = shutdown_ending
        self._on_stop = on_stop
        self._pending: list[bytes] = []
        self._waiter: asyncio.Future[None] | None = None
        self._produced = self._gone = self._revoked = self._started = False
        #: Revoked, and the source ends soon: its last frames are still written.
        self._draining = False
        #: Why the gateway cut the stream (the process shutting down, or fenced: `cut`),
        #: the source not ending by itself: it is stopped, then `_cut_ending` closes it.
        self._cut: str | None = None
        self._cut_ending = shutdown_ending

    @property
    def revoked(self) -> bool:
        """The stream ended because its key was revoked."""
        return self._revoked

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with ExitStack() as watches:
            if self._revocation is not None:
                watches.enter_context(self._revocation(self._revoke))
            if self._shutdown is not None:
                watches.enter_context(self._shutdown(self._shut_down))
            await self._respond(scope, receive, send)

    async def _respond(self, scope: Scope, receive: Receive, send: Send) -> None:
        watcher = asyncio.ensure_future(self._watch_disconnect(receive))
        producer = (None if self._frames is None
                    else asyncio.ensure_future(self._produce(self._frames)))
        tasks = [watcher] if producer is None else [watcher, producer]
        timed_out = False
        try:
            try:
                await self._write(send)
            except TimeoutError:
                timed_out = True
                log.info("sse_send_timeout", path=scope.get("path"), **self._log_ids)
            finally:
                if (self._on_stop is not None and producer is not None and not producer.done()
                        and (reason := self._stop_reason(timed_out)) is not None):
                    self._on_stop(reason)
                for task in tasks:
                    task.cancel()
            if self._cut is not None and self._started and not self._gone:
                # At once: the stopped source makes no frame more, and its cleanup (a call's
                # finish) may wait long for a database that does not answer.
                await self._end_cut(scope, send)
        finally:
            await asyncio.gather(*tasks, return_exceptions=True)
        if producer and not producer.cancelled() and (error := producer.exception()):
            raise error
        if self._revoked:
            await self._end_revoked(scope, receive, send)

    def _stop_reason(self, timed_out: bool) -> str | None:
        """Why the stream ends before its frames did; None: cancelled from outside, for no
        reason it was told."""
        if self._revoked:
            return KEY_REVOKED
        if self._cut is not None:
            return self._cut
        if self._gone or timed_out:
            return CLIENT_GONE
        return None

    async def _write(self, send: Send) -> None:
        """Everything pending in one write, then wait for more; a ping after `ping_s` of
        silence. Ends once the producer is done and its last frames are out (the body too,
        unless revoked: `key_revoked` follows)."""
        loop = asyncio.get_running_loop()
        await self._send(send, {"type": "http.response.start", "status": 200,
                                "headers": self.raw_headers})
        self._started = True
        last_write = loop.time()
        while True:
            if self._gone or self._cut or (self._revoked and not self._draining):
                return
            if self._source is not None:
                self._pending.extend(self._source.take())
                self._produced = self._source.ended
            if self._pending:
                last = self._produced and not self._revoked
                body = b"".join(self._pending)
                self._pending.clear()
                await self._send(send, {"type": "http.response.body", "body": body,
                                        "more_body": not last})
                if last:
                    return
                last_write = loop.time()
                continue
            if self._produced:
                if not self._revoked:
                    await self._send(send, {"type": "http.response.body", "body": b"",
                                            "more_body": False})
                return
            waiter = self._waiter = loop.create_future()
            if self._source is not None:
                self._source.notify(waiter)
            ping = loop.call_at(last_write + self._ping_s, self._wake)
            try:
                await waiter
            finally:
                ping.cancel()
                self._waiter = None
            if not self._pending and loop.time() >= last_write + self._ping_s:
                self._pending.append(PING_FRAME)

    async def _send(self, send: Send, message: Message) -> None:
        async with asyncio.timeout(self._send_timeout_s):
            await send(message)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _produce(self, source: AsyncGenerator[bytes, None]) -> None:
        # aclosing: the source's cleanup (a turn's finish) runs now, also when cancelled.
        try:
            async with aclosing(source) as frames:
                async for frame in frames:
                    self._pending.append(frame)
                    self._wake()
        finally:
            self._produced = True
            self._wake()

    async def _watch_disconnect(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._gone = True
        self._wake()

    def _revoke(self) -> None:
        if self._revoked or self._cut:
            return
        self._revoked = True
        self._draining = self._on_revoked is not None and self._on_revoked()
        self._wake()

    def _shut_down(self) -> None:
        if self._revoked or self._cut or self._produced:
            return
        if self._on_shutdown is not None and self._on_shutdown():
            return  # the source ends with its own last frames
        self.cut(SHUTTING_DOWN, self._shutdown_ending)

    def cut(self, reason: str, ending: bytes) -> None:
        """The gateway ends the stream now (app.answer.interruptions: the process shutting
        down, or fenced): the source is stopped, told `reason` (`on_stop`), and `ending` is
        the last frame after what it made. Once only; not once the source has ended."""
        if self._revoked or self._cut or self._produced:
            return
        self._cut, self._cut_ending = reason, ending
        self._wake()

    async def _end_cut(self, scope: Scope, send: Send) -> None:
        """After the stopped source's last frames, the cut's ending; a client that does not
        take them in time is let go as a slow one is."""
        body = b"".join([*self._pending, self._cut_ending])
        self._pending.clear()
        try:
            await self._send(send, {"type": "http.response.body", "body": body,
                                    "more_body": False})
        except TimeoutError:
            log.info("sse_send_timeout", path=scope.get("path"), **self._log_ids)

    async def _end_revoked(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._gone:
            log.info("sse_key_revoked", path=scope.get("path"), **self._log_ids)
            return
        # What the source made before the revocation, not yet written, goes first, as a
        # cut's does (_end_cut): the stopped call stores it, so its client must have it.
        made = b"".join(self._pending)
        self._pending.clear()
        await end_revoked(scope, receive, send, started=self._started, log_ids=self._log_ids,
                          ending=self._revoked_ending, made=made)


async def end_revoked(scope: Scope, receive: Receive, send: Send, *, started: bool,
                      log_ids: Mapping[str, str],
                      ending: RevokedEnding = NATIVE_REVOKED, made: bytes = b"") -> None:
    """End an event stream whose key was revoked: the frames `made` and not yet sent, the
    ending's last frame and the end of the body, or, when no byte was sent yet, the refusal
    it would have got a moment before."""
    log.info("sse_key_revoked", path=scope.get("path"), **log_ids)
    if started:
        await send({"type": "http.response.body", "body": made + ending.frame,
                    "more_body": False})
    else:  # revoked between authentication and the first byte: as if refused then
        await ending.refusal()(scope, receive, send)
