"""app.api.event_stream in-process: frames ready together go out in one write (from a
generator or a polled source), and every way a stream ends (done, client gone, stuck client)
closes its source."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import structlog

from app.api.event_stream import NATIVE_REVOKED, PING_FRAME, FrameResponse

SCOPE = {"type": "http", "method": "POST", "path": "/api/threads/x/messages", "headers": []}


async def never_disconnects() -> dict[str, Any]:
    await asyncio.Event().wait()
    return {"type": "http.disconnect"}


async def test_frames_made_while_the_writer_waits_share_one_write() -> None:
    sent: list[dict[str, Any]] = []

    async def frames() -> AsyncGenerator[bytes, None]:
        for burst in range(2):
            for n in range(3):  # three frames without a pause: one write
                yield b"data: %d.%d\n\n" % (burst, n)
            await asyncio.sleep(0.01)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    response = FrameResponse(frames(), ping_s=60, send_timeout_s=5)
    await asyncio.wait_for(response(SCOPE, never_disconnects, send), 5)
    bodies = [m["body"] for m in sent[1:] if m["body"]]
    assert bodies == [b"data: 0.0\n\ndata: 0.1\n\ndata: 0.2\n\n",
                      b"data: 1.0\n\ndata: 1.1\n\ndata: 1.2\n\n"]
    assert sent[-1]["more_body"] is False and sent[0]["type"] == "http.response.start"


async def test_frames_made_before_a_revocation_reach_the_client_before_its_ending() -> None:
    """A revoked stream that does not drain (the /v1 calls) still writes what its source made
    before the revocation and the writer had not yet taken: the stopped call stores it."""
    sent: list[dict[str, Any]] = []
    revoke: list[Callable[[], None]] = []

    @contextmanager
    def revocation(on_revoked: Callable[[], None]) -> Iterator[None]:
        revoke.append(on_revoked)
        yield

    async def frames() -> AsyncGenerator[bytes, None]:
        yield b"data: made\n\n"
        revoke[0]()  # before the writer wakes for the frame
        await asyncio.Event().wait()
        yield b"data: never\n\n"

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    response = FrameResponse(frames(), ping_s=60, send_timeout_s=5, revocation=revocation)
    await asyncio.wait_for(response(SCOPE, never_disconnects, send), 5)
    assert b"".join(m.get("body", b"") for m in sent[1:]) == (
        b"data: made\n\n" + NATIVE_REVOKED.frame)
    assert sent[-1]["more_body"] is False


async def test_a_silence_gets_pings_and_a_leaving_client_closes_the_source() -> None:
    sent: list[bytes] = []
    closed = asyncio.Event()
    left = asyncio.Event()

    async def frames() -> AsyncGenerator[bytes, None]:
        try:
            yield b"data: first\n\n"
            await asyncio.Event().wait()  # the model thinks forever
            yield b"never"
        finally:
            closed.set()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message.get("body", b""))
        if sent.count(PING_FRAME) == 2:
            left.set()

    async def receive() -> dict[str, Any]:
        await left.wait()
        return {"type": "http.disconnect"}

    response = FrameResponse(frames(), ping_s=0.01, send_timeout_s=5)
    await asyncio.wait_for(response(SCOPE, receive, send), 5)
    assert closed.is_set() and b"never" not in sent and sent[1] == b"data: first\n\n"


async def test_a_client_that_stops_reading_ends_the_stream_quietly() -> None:
    closed = asyncio.Event()

    async def frames() -> AsyncGenerator[bytes, None]:
        try:
            while True:
                yield b"data: more\n\n"
                await asyncio.sleep(0)
        finally:
            closed.set()

    calls = 0

    async def send(message: dict[str, Any]) -> None:
        nonlocal calls
        calls += 1
        if calls >= 3:  # the client's socket is full: this send never completes
            await asyncio.Event().wait()

    ids = {"user_id": "u1", "message_id": "m1"}
    response = FrameResponse(frames(), ping_s=60, send_timeout_s=0.05, log_ids=ids)
    with structlog.testing.capture_logs() as logs:
        await asyncio.wait_for(response(SCOPE, never_disconnects, send), 5)
    assert closed.is_set()
    assert [entry["event"] for entry in logs] == ["sse_send_timeout"]
    assert ids.items() <= logs[0].items()


class AppendedFrames:
    """A FrameSource as a running turn's log is one: another task appends, the writer
    polls."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.taken = 0
        self.closed = False
        self.waiters: list[asyncio.Future[None]] = []

    def append(self, frame: bytes | None) -> None:
        if frame is None:
            self.closed = True
        else:
            self.frames.append(frame)
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()

    def take(self) -> list[bytes]:
        ready, self.taken = self.frames[self.taken:], len(self.frames)
        return ready

    @property
    def ended(self) -> bool:
        return self.closed and self.taken == len(self.frames)

    def notify(self, waiter: asyncio.Future[None]) -> None:
        self.waiters.append(waiter)


async def test_a_polled_source_is_written_as_it_is_appended_and_ends_the_body() -> None:
    """No task between the appending task and the writer: what is appended while the
    writer is busy goes out in its next write, in order, and the body ends with the
    source."""
    source = AppendedFrames()
    sent: list[dict[str, Any]] = []
    slow_send = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message.get("body") == b"a":
            source.append(b"b")  # appended while this write is under way
            source.append(b"c")
            await slow_send.wait()

    async def appender() -> None:
        await asyncio.sleep(0)
        source.append(b"a")
        await asyncio.sleep(0.01)
        slow_send.set()
        await asyncio.sleep(0.01)
        source.append(b"d")
        source.append(None)

    response = FrameResponse(source, ping_s=60, send_timeout_s=5)
    await asyncio.wait_for(asyncio.gather(response(SCOPE, never_disconnects, send),
                                          appender()), 5)
    assert [m.get("body") for m in sent[1:]] == [b"a", b"bc", b"d"]
    assert sent[-1]["more_body"] is False
