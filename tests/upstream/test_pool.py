"""The sharded upstream pool (app.upstream.pool) against a real keep-alive server on loopback:
requests beyond one shard go to the next, every closed response leaves its shard's count,
connections are reused, and a proxy named in the environment is still used."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx
import pytest

from app.main import upstream_config
from app.settings import Settings
from app.upstream import UpstreamClient, make_http_client, make_openai_client
from app.upstream.pool import CONNECTIONS_PER_SHARD, ShardedTransport
from tests.support.live import free_port
from tests.support.scripted_upstream import finish_chunk, read_request, sse_body

ANSWER = sse_body(["Hel", "lo"], tail=f"data: {finish_chunk()}\n\ndata: [DONE]\n\n")


@dataclass
class HeldServer:
    """A keep-alive event-stream server whose answers end only once `release` is set; it
    counts the connections it was given and the request targets it read."""

    url: str
    release: asyncio.Event
    connections: int = 0
    targets: list[bytes] = field(default_factory=list)


@asynccontextmanager
async def held_server() -> AsyncIterator[HeldServer]:
    state = HeldServer("", asyncio.Event())

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state.connections += 1
        try:
            while True:
                head, _ = await read_request(reader)
                state.targets.append(head.split(b" ", 2)[1])
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"transfer-encoding: chunked\r\n\r\n")
                await writer.drain()
                await state.release.wait()
                writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(ANSWER), ANSWER))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    async with server:
        state.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        yield state


async def test_requests_fill_one_shard_then_the_next_and_leave_when_closed() -> None:
    transport = ShardedTransport(3 * CONNECTIONS_PER_SHARD)
    extra = 5
    async with held_server() as server, httpx.AsyncClient(transport=transport) as http:
        responses = await asyncio.gather(*(
            http.send(http.build_request("POST", server.url, content=b"{}"), stream=True)
            for _ in range(CONNECTIONS_PER_SHARD + extra)))
        assert transport.in_flight() == [CONNECTIONS_PER_SHARD, extra, 0]

        server.release.set()
        for response in responses:
            assert await response.aread() == ANSWER
            await response.aclose()
        assert transport.in_flight() == [0, 0, 0]

        # A light load stays on the first shard and reuses its kept-alive connections.
        for _ in range(3):
            response = await http.post(server.url, content=b"{}")
            assert response.content == ANSWER
        assert server.connections == CONNECTIONS_PER_SHARD + extra
        assert transport.in_flight() == [0, 0, 0]


async def test_a_request_that_fails_leaves_no_count_behind() -> None:
    transport = ShardedTransport(CONNECTIONS_PER_SHARD)
    async with httpx.AsyncClient(transport=transport) as http:
        with pytest.raises(httpx.ConnectError):
            await http.post(f"http://127.0.0.1:{free_port()}/v1", content=b"{}")
    assert transport.in_flight() == [0]


@pytest.fixture
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    return monkeypatch


async def test_the_upstream_goes_through_a_proxy_named_in_the_environment(
    no_proxy_settings: pytest.MonkeyPatch,
) -> None:
    """A gateway behind a forward proxy (HTTP_PROXY) still reaches its model server: the
    proxy receives the request for the model server's URL and relays its answer."""
    async with held_server() as proxy:
        proxy.release.set()
        no_proxy_settings.setenv("HTTP_PROXY", proxy.url.removesuffix("/v1"))
        model_url = f"http://model.invalid:{free_port()}/v1"
        config = upstream_config(Settings(upstream_base_url=model_url,
                                          upstream_max_retries=0))
        http = make_http_client(config)
        client = UpstreamClient(make_openai_client(config, http), config, http)
        try:
            stream = await client.open_stream([{"role": "user", "content": "Hi"}])
            text = "".join([chunk.text async for chunk in stream.chunks()])
            await stream.close()
        finally:
            await http.aclose()
    assert text == "Hello"
    assert proxy.targets == [f"{model_url}/chat/completions".encode()]
