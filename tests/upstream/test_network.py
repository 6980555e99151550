"""The upstream connections on asyncio's own transports (app.upstream.network), against real
servers on loopback, plain and TLS, on asyncio's loop and on uvloop (uvicorn's loop in
production): what has come is read at once, a silent server times out, a closed idle
connection is known as such, a slow reader holds the server back, and the gateway's pool
uses them."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpcore
import pytest
import uvloop

from app.upstream.network import MAX_BUFFERED, AsyncioBackend, AsyncioStream
from app.upstream.pool import ShardedTransport

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
#: Runs a scenario to its end on a fresh loop (the `run` fixture).
Run = Callable[[Coroutine[Any, Any, None]], None]


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Run:
    """Runs a scenario to its end on a fresh loop of the parameter's kind."""
    def run_on_loop(scenario: Coroutine[Any, Any, None]) -> None:
        with asyncio.Runner(loop_factory=LOOPS[request.param]) as runner:
            runner.run(scenario)
    return run_on_loop


@asynccontextmanager
async def server(serve: Serve, tls: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    """A loopback server running `serve` for each connection; yields its port."""
    async def guarded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    listening = await asyncio.start_server(guarded, "127.0.0.1", 0, ssl=tls)
    async with listening:
        yield listening.sockets[0].getsockname()[1]


async def until(condition: Callable[[], bool], passes: int = 1000) -> bool:
    """Whether `condition` holds within `passes` passes of the loop."""
    for _ in range(passes):
        if condition():
            return True
        await asyncio.sleep(0)
    return condition()


async def connect(port: int) -> AsyncioStream:
    stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5)
    assert isinstance(stream, AsyncioStream)
    return stream


def test_a_read_takes_everything_that_has_come_and_then_the_end(run: Run) -> None:
    parts = [b"data: %d\n\n" % n for n in range(200)]
    sent = asyncio.Event()

    async def serve(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for part in parts:  # each in a pass of the loop of its own: arriving one by one
            writer.write(part)
            await asyncio.sleep(0)
        await writer.drain()
        sent.set()

    async def scenario() -> None:
        async with server(serve) as port:
            stream = await connect(port)
            await sent.wait()
            received, reads = b"", 0
            async with asyncio.timeout(5):
                while block := await stream.read(64 * 1024, timeout=5):
                    received, reads = received + block, reads + 1
            assert received == b"".join(parts)
            assert reads < len(parts) / 10, "the parts that had come were read one by one"
            await stream.aclose()

    run(scenario())


def test_a_server_that_sends_nothing_is_a_read_timeout(run: Run) -> None:
    async def serve(reader: asyncio.StreamReader, _: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client leaves

    async def scenario() -> None:
        async with server(serve) as port:
            stream = await connect(port)
            with pytest.raises(httpcore.ReadTimeout):
                async with asyncio.timeout(5):  # fails the test rather than hanging it
                    await stream.read(1024, timeout=0)
            await stream.write(b"still usable", timeout=5)
            await stream.aclose()

    run(scenario())


def test_an_idle_connection_the_server_closed_or_spoke_on_is_not_reusable(run: Run) -> None:
    says = asyncio.Queue[bytes | None]()

    async def serve(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (word := await says.get()) is not None:
            writer.write(word)
            await writer.drain()

    async def scenario() -> None:
        async with server(serve) as port:
            stream = await connect(port)
            assert not stream.get_extra_info("is_readable")
            says.put_nowait(b"unasked")
            assert await until(lambda: stream.get_extra_info("is_readable"))
            assert await stream.read(1024, timeout=5) == b"unasked"
            assert not stream.get_extra_info("is_readable")
            says.put_nowait(None)  # the server closes
            assert await until(lambda: stream.get_extra_info("is_readable"))
            assert await stream.read(1024, timeout=5) == b""
            await stream.aclose()

    run(scenario())


def test_a_reader_that_does_not_read_holds_the_server_back(run: Run) -> None:
    sent = bytes(range(256)) * (32 * 1024)  # 8 MB
    drained = asyncio.Event()

    async def serve(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(sent)
        await writer.drain()
        drained.set()

    async def scenario() -> None:
        async with server(serve) as port:
            stream = await connect(port)
            assert await until(lambda: stream.get_extra_info("is_readable"))
            await until(lambda: drained.is_set(), passes=2000)
            assert not drained.is_set(), "the server sent everything to a reader reading none"
            held = sum(len(chunk) for chunk in stream._chunks)
            assert held <= MAX_BUFFERED + 256 * 1024
            received = b""
            while len(received) < len(sent):
                received += await stream.read(64 * 1024, timeout=5)
            assert received == sent
            await stream.aclose()

    run(scenario())


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A self-signed certificate for localhost and 127.0.0.1, and its key (openssl)."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True)
    yield cert, key


def contexts(certificate: tuple[Path, Path]) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(the server's context, a client's trusting the certificate)."""
    cert, key = certificate
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    return served, ssl.create_default_context(cafile=str(cert))


def test_an_https_answer_cut_without_its_closing_alert_ends_as_a_plain_one(
        run: Run, certificate: tuple[Path, Path]) -> None:
    served, trusting = contexts(certificate)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"connection: close\r\n\r\ndata: [DONE]\n\n")
        await writer.drain()
        writer.transport.abort()  # no close_notify: as many servers behind a proxy end

    async def scenario() -> None:
        async with server(serve, served) as port, httpcore.AsyncConnectionPool(
                ssl_context=trusting, network_backend=AsyncioBackend()) as pool:
            response = await pool.request("POST", f"https://localhost:{port}/v1")
            assert response.status == 200
            assert response.content == b"data: [DONE]\n\n"

    run(scenario())


def test_an_https_server_not_trusted_is_a_connect_error(
        run: Run, certificate: tuple[Path, Path]) -> None:
    served, _ = contexts(certificate)

    async def serve(reader: asyncio.StreamReader, _: asyncio.StreamWriter) -> None:
        await reader.read()

    async def scenario() -> None:
        async with server(serve, served) as port:
            stream = await connect(port)
            with pytest.raises(httpcore.ConnectError):
                await stream.start_tls(ssl.create_default_context(), "localhost", timeout=5)

    run(scenario())


def test_a_port_nobody_listens_on_is_a_connect_error(run: Run) -> None:
    async def scenario() -> None:
        async with server(lambda reader, writer: asyncio.sleep(0)) as port:
            pass  # closed: the port is free again
        with pytest.raises(httpcore.ConnectError):
            await connect(port)

    run(scenario())


def test_the_gateways_pool_connects_through_asyncios_transports() -> None:
    """httpx takes no network backend: the shards' pools are replaced (app.upstream.pool),
    which an httpx that renamed its pool's attribute would silently undo."""
    transport = ShardedTransport(30)
    pools = [shard._pool for shard in transport._shards]
    assert all(isinstance(pool._network_backend, AsyncioBackend) for pool in pools)
