"""httpcore's network backend on asyncio's own transports, for the upstream connections.

httpcore's default backend wraps each socket in anyio's streams: per connection a stream
object, its protocol with a queue and two Events, and per read a cancel scope, whether or not
the bytes are already there. And whenever a request looks for a connection, the pool asks
every idle one whether its server has closed it, which anyio's stream answers with a poll()
on the socket. Here a connection is one asyncio Protocol: the loop already reads each socket
as bytes arrive, so a read takes what has come (the many small chunks of a fast model's
answer in one go) and waits (with a timeout) only when nothing has; and whether an idle
connection's server closed it, or sent anything at all, is already known without a system
call. Reading pauses once MAX_BUFFERED bytes wait to be read, so a slow reader still slows
the model server down (TCP's own flow control), as it did through anyio.

TLS is the loop's own (`loop.start_tls`); a TLS connection cut without its closing alert
ends like a plain one, as anyio's non-standard-compatible TLS streams did for httpcore."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Iterable
from typing import Any, cast

import httpcore

#: Bytes a connection takes from the socket before its reader has read them; past this the
#: socket is no longer read until the reader has taken half. As much as httpcore reads at
#: once: a turn paced by a slow client holds no more of its answer in memory than that (the
#: rest waits in the kernel's buffers, or at the model server).
MAX_BUFFERED = 64 * 1024

#: As anyio's connect_tcp: the next of a name's addresses is tried after this long.
HAPPY_EYEBALLS_DELAY_S = 0.25

#: As httpcore's: (level, option, value) or (level, option, None, length).
SocketOption = (tuple[int, int, int] | tuple[int, int, bytes | bytearray]
                | tuple[int, int, None, int])


class AsyncioStream(asyncio.Protocol, httpcore.AsyncNetworkStream):
    """One connection: asyncio's Protocol on one side, httpcore's stream on the other."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._eof = False
        self._lost: Exception | None = None
        self._reading_paused = False
        self._writing_paused = False
        #: A read or a write waiting for the socket; done when there is news for it.
        self._waiter: asyncio.Future[None] | None = None

    # -- asyncio's side ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport's subclasses, but they are its kind.
        self._transport = cast("asyncio.Transport", transport)

    def data_received(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered >= MAX_BUFFERED and not self._reading_paused:
            self._reading_paused = True
            self._require_transport().pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._lost = exc
        self._wake()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _require_transport(self) -> asyncio.Transport:
        assert self._transport is not None
        return self._transport

    # -- httpcore's side --------------------------------------------------------------------

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        """What has come, up to max_bytes; b"" once the server has closed (asyncio's TLS and
        uvloop's end a connection cut without its closing alert as a closed one)."""
        while not self._chunks:
            if self._lost is not None:
                raise httpcore.ReadError(str(self._lost) or type(self._lost).__name__)
            if self._eof:
                return b""
            await self._wait(timeout, httpcore.ReadTimeout)
        return self._take(max_bytes)

    def _take(self, max_bytes: int) -> bytes:
        data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        if len(data) > max_bytes:
            self._chunks = [data[max_bytes:]]
            data = data[:max_bytes]
        else:
            self._chunks = []
        self._buffered -= len(data)
        if self._reading_paused and self._buffered < MAX_BUFFERED // 2:
            self._reading_paused = False
            if self._transport is not None and not self._transport.is_closing():
                self._transport.resume_reading()
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        transport = self._transport
        if transport is None or transport.is_closing() or self._eof:
            raise httpcore.WriteError("the connection is closed")
        transport.write(buffer)
        while self._writing_paused and not self._eof:
            await self._wait(timeout, httpcore.WriteTimeout)
        if self._lost is not None:
            raise httpcore.WriteError(str(self._lost) or type(self._lost).__name__)

    async def _wait(self, timeout: float | None, timed_out: type[httpcore.TimeoutException]
                    ) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError as exc:
            raise timed_out(f"no news from the server in {timeout} s") from exc
        finally:
            self._waiter = None

    async def aclose(self) -> None:
        if self._transport is not None:
            self._transport.close()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                tls = await loop.start_tls(self._require_transport(), self, ssl_context,
                                           server_hostname=server_hostname,
                                           ssl_handshake_timeout=timeout)
        except TimeoutError as exc:
            await self.aclose()
            raise httpcore.ConnectTimeout("the TLS handshake timed out") from exc
        except (OSError, ssl.SSLError, ConnectionError) as exc:
            await self.aclose()
            raise httpcore.ConnectError(str(exc)) from exc
        if tls is None:  # the connection closed during the handshake
            await self.aclose()
            raise httpcore.ConnectError("the server closed the connection during TLS")
        self._transport = tls
        return self

    def get_extra_info(self, info: str) -> Any:
        transport = self._transport
        if info == "is_readable":  # for an idle connection: the server closed it, or spoke
            return self._eof or bool(self._chunks) or transport is None or transport.is_closing()
        if transport is None:
            return None
        name = {"ssl_object": "ssl_object", "client_addr": "sockname",
                "server_addr": "peername", "socket": "socket"}.get(info)
        return transport.get_extra_info(name) if name else None


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """Connections as AsyncioStream (see the module's docstring)."""

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[SocketOption] | None = None,
                          ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        if isinstance(loop, asyncio.BaseEventLoop):
            opening = loop.create_connection(AsyncioStream, host, port, local_addr=local,
                                             happy_eyeballs_delay=HAPPY_EYEBALLS_DELAY_S)
        else:  # uvloop (uvicorn's loop where installed) tries the addresses in turn
            opening = loop.create_connection(AsyncioStream, host, port, local_addr=local)
        return await _connected(opening, timeout, f"{host}:{port}", socket_options)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[SocketOption] | None = None,
                                  ) -> httpcore.AsyncNetworkStream:
        opening = asyncio.get_running_loop().create_unix_connection(AsyncioStream, path)
        return await _connected(opening, timeout, path, socket_options)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def _connected(opening: Awaitable[tuple[asyncio.BaseTransport, AsyncioStream]],
                     timeout: float | None, where: str,
                     options: Iterable[SocketOption] | None) -> AsyncioStream:
    """The connection `opening` makes within `timeout`, its failures as httpcore's, with
    httpcore's socket options set (TCP_NODELAY is the loop's default already)."""
    try:
        async with asyncio.timeout(timeout):
            _, stream = await opening
    except TimeoutError as exc:
        raise httpcore.ConnectTimeout(f"no connection to {where} in time") from exc
    except OSError as exc:
        raise httpcore.ConnectError(str(exc)) from exc
    sock: socket.socket | None = stream.get_extra_info("socket")
    if sock is not None:
        for option in options or ():
            sock.setsockopt(*option)
    return stream
