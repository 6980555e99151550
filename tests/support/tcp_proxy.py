"""A TCP proxy a test owns, to cut a PostgreSQL server off from a gateway without touching
the server: `cut()` closes every proxied connection and the listening socket (new
connections are refused), `restore()` listens again on the same port. `silence()` is a
partition instead: every socket stays open and new ones are accepted, but nothing is
forwarded either way, no FIN and no RST; `speak()` forwards again what was held, as TCP
delivers what it retransmitted once a partition heals.

It runs its own event loop in a thread: the gateway subprocess must reach the database while
the test blocks (start_gateway waits synchronously)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from tests.support.gateway import free_port


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cg-tcp-proxy",
                                        daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._thread.start()

    def _call(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)  # type: ignore[arg-type]

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while data := await reader.read(65536):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(asyncio.CancelledError):
            await self._flowing.wait()  # not even the end of a connection while silent
        writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        await self._flowing.wait()  # accepted, and held while silent
        if writer.is_closing():
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            self._writers -= {writer, up_writer}

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port,
                                                  reuse_address=True)

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()  # RST, like a server that went away
        self._writers.clear()
        self._flowing.set()  # what was held ends with its connection

    async def _set_flowing(self, flowing: bool) -> None:
        if flowing:
            self._flowing.set()
        else:
            self._flowing.clear()

    def silence(self) -> None:
        self._call(self._set_flowing(False))

    def speak(self) -> None:
        self._call(self._set_flowing(True))

    def restore(self) -> None:
        self._call(self._listen())

    def cut(self) -> None:
        self._call(self._cut())

    def close(self) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)


@contextlib.contextmanager
def running_proxy(target_host: str, target_port: int) -> Iterator[TcpProxy]:
    """A listening proxy, closed after the block."""
    proxy = TcpProxy(target_host, target_port)
    proxy.restore()
    try:
        yield proxy
    finally:
        proxy.close()
