"""The upstream transport (app.upstream.transport) against real servers on loopback, plain and
TLS, on asyncio's loop and on uvloop (uvicorn's loop in production): the request arrives as
httpx built it, a read takes every chunk that has come, a connection read to its end is
reused and one closed early is dropped, a slow reader holds the server back, every failure
is the httpx error the rest of the gateway classifies, and a proxy named in the environment
is still used."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvloop

from app.config.settings import Settings
from app.gateway.main import upstream_config
from app.upstream import UpstreamClient, make_http_client, make_openai_client
from app.upstream.transport import AiohttpTransport
from tests.support.gateway import free_port
from tests.support.scripted_upstream import finish_chunk, read_request, sse_body

ANSWER = sse_body(["Hel", "lo"], tail=f"data: {finish_chunk()}\n\ndata: [DONE]\n\n")
HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n")

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
#: Runs a scenario to its end on a fresh loop (the `run` fixture).
Run = Callable[[Coroutine[Any, Any, None]], None]


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Run:
    def run_on_loop(scenario: Coroutine[Any, Any, None]) -> None:
        with asyncio.Runner(loop_factory=LOOPS[request.param]) as runner:
            runner.run(scenario)
    return run_on_loop


@dataclass
class Served:
    """What a server saw: its connections, and each request's head and body."""

    port: int = 0
    connections: int = 0
    requests: list[tuple[bytes, bytes]] = field(default_factory=list)


@asynccontextmanager
async def server(serve: Serve, tls: ssl.SSLContext | None = None) -> AsyncIterator[Served]:
    """A loopback server running `serve` for each connection (after counting it)."""
    served = Served()

    async def guarded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.connections += 1
        try:
            await serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    listening = await asyncio.start_server(guarded, "127.0.0.1", 0, ssl=tls)
    async with listening:
        served.port = listening.sockets[0].getsockname()[1]
        yield served


def answering(served: list[Served]) -> Serve:
    """Answers every request of a keep-alive connection with ANSWER, noting the request."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            served[0].requests.append(await read_request(reader))
            writer.write(HEAD + b"%x\r\n%s\r\n0\r\n\r\n" % (len(ANSWER), ANSWER))
            await writer.drain()
    return serve


@asynccontextmanager
async def client(timeout: httpx.Timeout | None = None) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=AiohttpTransport(),
                                 timeout=timeout or httpx.Timeout(5.0)) as http:
        yield http


async def streamed(http: httpx.AsyncClient, served: Served) -> httpx.Response:
    """A POST's response to `served`, its body unread."""
    url = f"http://127.0.0.1:{served.port}/v1"
    return await http.send(http.build_request("POST", url), stream=True)


async def until(condition: Callable[[], bool], passes: int = 1000) -> bool:
    """Whether `condition` holds within `passes` passes of the loop."""
    for _ in range(passes):
        if condition():
            return True
        await asyncio.sleep(0)
    return condition()


def test_the_request_arrives_as_httpx_built_it_and_its_connection_is_reused(run: Run) -> None:
    async def scenario() -> None:
        seen: list[Served] = []
        async with server(answering(seen)) as served, client() as http:
            seen.append(served)
            for body in (b'{"n": 1}', b'{"n": 2}'):
                response = await http.post(f"http://127.0.0.1:{served.port}/v1/chat",
                                           content=body, headers={"Authorization": "Bearer k"})
                assert response.status_code == 200
                assert response.headers["content-type"] == "text/event-stream"
                assert response.content == ANSWER
        assert served.connections == 1, "a body read to its end gave its connection back"
        assert [body for _, body in served.requests] == [b'{"n": 1}', b'{"n": 2}']
        head = served.requests[0][0].lower()
        assert head.startswith(b"post /v1/chat http/1.1\r\n")
        assert b"\r\nauthorization: bearer k\r\n" in head
        assert b"\r\ncontent-length: 8\r\n" in head
        assert b"transfer-encoding" not in head

    run(scenario())


def test_a_read_takes_every_chunk_that_has_come(run: Run) -> None:
    parts = [b"data: %d\n\n" % n for n in range(200)]
    sent = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(HEAD)
        for part in parts:  # each chunk in a pass of the loop of its own
            writer.write(b"%x\r\n%s\r\n" % (len(part), part))
            await asyncio.sleep(0)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        sent.set()

    async def scenario() -> None:
        async with server(serve) as served, client() as http:
            response = await streamed(http, served)
            await sent.wait()
            blocks = [block async for block in response.aiter_raw()]
            await response.aclose()
            assert b"".join(blocks) == b"".join(parts)
            assert len(blocks) < len(parts) / 10, "the chunks that had come came one by one"

    run(scenario())


def test_a_body_closed_before_its_end_drops_its_connection(run: Run) -> None:
    left = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(HEAD + b"6\r\ndata: \r\n")
        await writer.drain()
        if await reader.read() == b"":  # the client went away: stop generating
            left.set()

    async def scenario() -> None:
        async with server(serve) as served, client() as http:
            url = f"http://127.0.0.1:{served.port}/v1"
            response = await http.send(http.build_request("POST", url), stream=True)
            assert await anext(response.aiter_raw()) == b"data: "
            await response.aclose()
            async with asyncio.timeout(5):
                await left.wait()
            response = await http.send(http.build_request("POST", url), stream=True)
            await response.aclose()
            assert served.connections == 2

    run(scenario())


def test_a_reader_that_does_not_read_holds_the_server_back(run: Run) -> None:
    sent = bytes(range(256)) * (32 * 1024)  # 8 MB
    drained = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(sent) + sent)
        await writer.drain()
        drained.set()

    async def scenario() -> None:
        async with server(serve) as served, client() as http:
            response = await streamed(http, served)
            await until(drained.is_set, passes=2000)
            assert not drained.is_set(), "the server sent everything to a reader reading none"
            assert await response.aread() == sent
            await response.aclose()

    run(scenario())


def test_a_silent_server_is_a_read_timeout(run: Run) -> None:
    async def silent(reader: asyncio.StreamReader, _: asyncio.StreamWriter) -> None:
        await reader.read()

    async def silent_mid_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                              ) -> None:
        await read_request(reader)
        writer.write(HEAD + b"6\r\ndata: \r\n")
        await reader.read()

    async def scenario() -> None:
        quick = httpx.Timeout(5.0, read=0.05)
        async with server(silent) as served, client(quick) as http:
            with pytest.raises(httpx.ReadTimeout):
                await http.post(f"http://127.0.0.1:{served.port}/v1")
        async with server(silent_mid_body) as served, client(quick) as http:
            response = await streamed(http, served)
            with pytest.raises(httpx.ReadTimeout):
                await response.aread()
            await response.aclose()

    run(scenario())


def test_a_server_that_closes_before_or_during_its_answer_is_a_protocol_error(run: Run
                                                                                ) -> None:
    async def hangs_up(reader: asyncio.StreamReader, _: asyncio.StreamWriter) -> None:
        await read_request(reader)

    async def cuts(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(HEAD + b"20\r\ndata: a cut ")
        await writer.drain()

    async def scenario() -> None:
        async with server(hangs_up) as served, client() as http:
            with pytest.raises(httpx.RemoteProtocolError):
                await http.post(f"http://127.0.0.1:{served.port}/v1")
        async with server(cuts) as served, client() as http:
            response = await streamed(http, served)
            with pytest.raises(httpx.RemoteProtocolError):
                await response.aread()
            await response.aclose()

    run(scenario())


def test_a_port_nobody_listens_on_is_a_connect_error(run: Run) -> None:
    async def scenario() -> None:
        async with client() as http:
            with pytest.raises(httpx.ConnectError):
                await http.post(f"http://127.0.0.1:{free_port()}/v1")

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


def served_tls(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


def test_an_https_answer_cut_without_its_closing_alert_ends_as_a_plain_one(
        run: Run, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The gateway trusts what SSL_CERT_FILE names (httpx's rule), as for an internal CA."""
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"connection: close\r\n\r\ndata: [DONE]\n\n")
        await writer.drain()
        writer.transport.abort()  # no close_notify: as many servers behind a proxy end

    async def scenario() -> None:
        async with server(serve, served_tls(certificate)) as served, client() as http:
            response = await http.post(f"https://localhost:{served.port}/v1")
            assert response.status_code == 200
            assert response.content == b"data: [DONE]\n\n"

    run(scenario())


def test_an_https_server_not_trusted_is_a_connect_error(
        run: Run, certificate: tuple[Path, Path]) -> None:
    async def serve(reader: asyncio.StreamReader, _: asyncio.StreamWriter) -> None:
        await reader.read()

    async def scenario() -> None:
        async with server(serve, served_tls(certificate)) as served, client() as http:
            with pytest.raises(httpx.ConnectError):
                await http.post(f"https://localhost:{served.port}/v1")

    run(scenario())


@pytest.fixture
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    return monkeypatch


async def streamed_text(model_url: str) -> str:
    """A turn's answer through the gateway's own upstream client."""
    config = upstream_config(Settings(upstream_base_url=model_url, upstream_max_retries=0))
    http = make_http_client(config)
    upstream = UpstreamClient(make_openai_client(config, http), config, http)
    try:
        stream = await upstream.open_stream([{"role": "user", "content": "Hi"}])
        text = "".join([chunk.text async for chunk in stream.chunks()])
        await stream.close()
    finally:
        await http.aclose()
    return text


async def test_the_gateways_client_streams_over_aiohttp_without_a_proxy(
    no_proxy_settings: pytest.MonkeyPatch,
) -> None:
    seen: list[Served] = []
    async with server(answering(seen)) as served:
        seen.append(served)
        assert await streamed_text(f"http://127.0.0.1:{served.port}/v1") == "Hello"
    config = upstream_config(Settings(upstream_base_url="http://127.0.0.1:1/v1"))
    http = make_http_client(config)
    assert isinstance(http._transport, AiohttpTransport)
    await http.aclose()


async def test_the_upstream_goes_through_a_proxy_named_in_the_environment(
    no_proxy_settings: pytest.MonkeyPatch,
) -> None:
    """A gateway behind a forward proxy (HTTP_PROXY) still reaches its model server: the
    proxy receives the request for the model server's URL and relays its answer."""
    seen: list[Served] = []
    async with server(answering(seen)) as proxy:
        seen.append(proxy)
        no_proxy_settings.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        model_url = f"http://model.invalid:{free_port()}/v1"
        assert await streamed_text(model_url) == "Hello"
    [(head, _)] = proxy.requests
    assert head.startswith(f"POST {model_url}/chat/completions ".encode())
