"""The upstream client (app.upstream) against the real demo model server over loopback:
streamed chunks and provider usage, non-streamed completions, and every failure reduced to
the code a client acts on (upstream_unavailable / upstream_error / upstream_timeout)."""

from __future__ import annotations

import asyncio
import gzip
import math
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import openai
import pytest
import structlog

from app.answer.inputs import ProviderUsage, UpstreamChunk
from app.config.settings import Settings
from app.gateway.main import upstream_config
from app.upstream import (
    UpstreamClient,
    UpstreamError,
    UpstreamStream,
    make_http_client,
    make_openai_client,
)
from app.upstream.errors import classify
from tests.support.gateway import DemoLlm, free_port
from tests.support.scripted_upstream import (
    finish_chunk,
    read_request,
    scripted_upstream,
    sse_body,
)

SYSTEM = "Be brief."
META = '<!-- METADATA: {"language": "en", "sources": [], "awaiting": null} -->'
HI_ANSWER = (
    "Here is what I can tell you about **Hi**.\n\n"
    "- This answer comes from the Chatgate demo model, not a real language model.\n"
    "- Your message had 1 word and 2 characters.\n"
    "- It streams in small pieces, the way a real model's tokens arrive.\n\n"
    "Ask me anything else.\n\n" + META
)

MakeClient = Callable[..., UpstreamClient]


def conversation(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]


def demo_usage(messages: list[dict[str, str]], answer: str) -> ProviderUsage:
    """What the demo server reports (docs/demo_scenarios.md: ceil(len / 4), +3 a message)."""
    prompt = sum(math.ceil(len(m["content"]) / 4) + 3 for m in messages)
    completion = math.ceil(len(answer) / 4)
    return ProviderUsage(prompt, completion, prompt + completion)


@pytest.fixture
async def make_client(demo_llm: DemoLlm) -> AsyncIterator[MakeClient]:
    """UpstreamClient factory over one shared httpx client, as the gateway builds it;
    defaults: the demo server, no retries, short timeouts."""
    http_clients: list[Any] = []

    def make(**overrides: Any) -> UpstreamClient:
        settings = Settings(**{
            "upstream_base_url": demo_llm.base_url,
            "upstream_max_retries": 0,
            "first_token_timeout_s": 5.0,
            "upstream_read_timeout_s": 5.0,
            "upstream_connect_timeout_s": 2.0,
            **overrides,
        })
        config = upstream_config(settings)
        http = make_http_client(config)
        http_clients.append(http)
        return UpstreamClient(make_openai_client(config, http), config, http)

    yield make
    for http in http_clients:
        await http.aclose()


async def stream_all(client: UpstreamClient, text: str) -> list[UpstreamChunk]:
    stream = await client.open_stream(conversation(text))
    try:
        return [chunk async for chunk in stream.chunks()]
    finally:
        await stream.close()


async def test_stream_yields_the_answer_in_pieces_then_the_provider_usage(
    make_client: MakeClient,
) -> None:
    chunks = await stream_all(make_client(), "Hi")

    assert "".join(c.text for c in chunks) == HI_ANSWER  # raw: filtering is the gateway's job
    assert sum(1 for c in chunks if c.text) > 10  # token-sized pieces, not one blob
    assert [c.finish_reason for c in chunks if c.finish_reason] == ["stop"]
    assert {c.model for c in chunks} == {"demo-1"}
    usages = [c.usage for c in chunks if c.usage is not None]
    assert usages == [demo_usage(conversation("Hi"), HI_ANSWER)]
    assert chunks[-1].usage is not None  # the usage chunk comes last, after finish


async def test_stream_without_provider_usage_reports_none(make_client: MakeClient) -> None:
    chunks = await stream_all(make_client(), "Hi [no-usage]")
    assert "".join(c.text for c in chunks).endswith(META)
    assert all(c.usage is None for c in chunks)


async def test_complete_returns_the_whole_answer_and_its_usage(make_client: MakeClient) -> None:
    completion = await make_client().complete(conversation("Hi"), max_tokens=1024)
    assert completion.text == HI_ANSWER
    assert completion.usage == demo_usage(conversation("Hi"), HI_ANSWER)
    assert completion.model == "demo-1"


async def test_complete_honours_max_tokens(make_client: MakeClient) -> None:
    completion = await make_client().complete(conversation("Hi"), max_tokens=5)
    assert completion.text == HI_ANSWER[:20]  # the demo cuts at 4 characters a token
    assert completion.usage is not None and completion.usage.completion_tokens == 5


async def test_nothing_listening_is_upstream_unavailable(make_client: MakeClient) -> None:
    client = make_client(upstream_base_url=f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(UpstreamError) as streamed:
        await client.open_stream(conversation("Hi"))
    assert streamed.value.code == "upstream_unavailable"
    with pytest.raises(UpstreamError) as completed:
        await client.complete(conversation("Hi"), max_tokens=16)
    assert completed.value.code == "upstream_unavailable"


async def test_error_before_the_first_token_is_upstream_error_without_retries(
    make_client: MakeClient, demo_llm: DemoLlm
) -> None:
    client = make_client()
    before = demo_llm.stats()["requests"]
    with pytest.raises(UpstreamError) as streamed:
        await client.open_stream(conversation("Hi [error-before]"))
    assert streamed.value.code == "upstream_error"
    assert streamed.value.message == "The model server failed (HTTP 500)."
    assert demo_llm.stats()["requests"] == before + 1  # upstream_max_retries=0 is honoured

    with pytest.raises(UpstreamError) as completed:
        await client.complete(conversation("Hi [error-before]"), max_tokens=16)
    assert completed.value.code == "upstream_error"


async def test_a_stream_cut_midway_is_upstream_error_after_the_text_so_far(
    make_client: MakeClient,
) -> None:
    stream = await make_client().open_stream(conversation("Hi [error-mid]"))
    received = ""
    try:
        with pytest.raises(UpstreamError) as cut:
            async for chunk in stream.chunks():
                received += chunk.text
    finally:
        await stream.close()
    assert cut.value.code == "upstream_error"
    assert received and HI_ANSWER.startswith(received) and received != HI_ANSWER


async def test_missing_first_token_is_upstream_timeout_and_stops_the_model(
    make_client: MakeClient, demo_llm: DemoLlm
) -> None:
    cancelled_before = demo_llm.stats()["streams_cancelled"]
    # demo_llm holds [slow-first]'s first token back 1.5 s; the deadline, 0.8 s, also covers
    # connecting, which a loaded machine can make take a few tenths of a second
    stream = await make_client(first_token_timeout_s=0.8).open_stream(
        conversation("Hi [slow-first]"))
    try:
        with pytest.raises(UpstreamError) as late:
            async for _ in stream.chunks():
                pass
    finally:
        await stream.close()
    assert late.value.code == "upstream_timeout"
    await wait_until(lambda: demo_llm.stats()["streams_cancelled"] > cancelled_before)


async def test_complete_timeout_is_upstream_timeout(make_client: MakeClient) -> None:
    with pytest.raises(UpstreamError) as late:
        await make_client().complete(conversation("Hi [slow-first]"), max_tokens=16,
                                     timeout_s=0.3)
    assert late.value.code == "upstream_timeout"


async def wait_until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def test_a_provider_error_that_echoes_the_request_reaches_the_log_only_without_markers(
) -> None:
    """Some providers quote the request in their error: the user reads one short sentence,
    and the log keeps the provider's words with the MSG_CONTEXT (the history) removed."""
    echoed = openai.APIError(
        'bad request: <!-- MSG_CONTEXT: {"history": [{"role": "user"}]} -->\nHello', None,
        body=None,
    )
    with structlog.testing.capture_logs() as logs:
        error = classify(echoed)
    assert error.code == "upstream_error"
    assert error.message == "The model server failed."
    [line] = [entry for entry in logs if entry["event"] == "upstream_failed"]
    assert "<!--" not in line["detail"] and "MSG_CONTEXT" not in line["detail"]
    assert "Hello" in line["detail"]


async def test_malformed_stream_data_is_a_bad_response_after_the_text_so_far(
    make_client: MakeClient,
) -> None:
    """A proxy that cut or mangled the body: a stream line that is not JSON."""
    body = sse_body(["Hello"], tail='data: {"id": "c1", "choi\n\n')
    async with scripted_upstream(body) as base_url:
        stream = await make_client(upstream_base_url=base_url).open_stream(conversation("Hi"))
        received = ""
        try:
            with pytest.raises(UpstreamError) as broken:
                async for chunk in stream.chunks():
                    received += chunk.text
        finally:
            await stream.close()
    assert received == "Hello"
    assert broken.value.code == "upstream_bad_response"


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
async def test_a_content_encoded_stream_reads_like_a_plain_one(encoding: str) -> None:
    """An event stream is read raw unless the server encoded it; a gzip one is decoded."""
    body = (b'data: {"choices": [{"delta": {"content": "Hi"}, "finish_reason": "stop"}]}\n\n'
            b"data: [DONE]\n\n")
    headers = {"content-type": "text/event-stream"}
    if encoding == "gzip":
        body, headers["content-encoding"] = gzip.compress(body), "gzip"
    async def arriving() -> AsyncIterator[bytes]:  # a body on the wire, not one in memory
        for start in range(0, len(body), 7):
            yield body[start:start + 7]

    http = httpx.AsyncClient(transport=httpx.MockTransport(
        lambda request: httpx.Response(200, headers=headers, content=arriving())))
    async with http:
        response = await http.send(http.build_request("GET", "http://model.test/"),
                                   stream=True)
        stream = UpstreamStream(response, time.monotonic() + 5)
        chunks = [chunk async for chunk in stream.chunks()]
        await stream.close()
    assert [(c.text, c.finish_reason) for c in chunks] == [("Hi", "stop")]


async def test_finished_answers_reuse_one_connection_to_the_model_server(
    make_client: MakeClient,
) -> None:
    """A whole answer's body is read to its end, so the next turn reuses the connection
    instead of opening one per turn."""
    body = sse_body(["Hel", "lo"], tail=f"data: {finish_chunk()}\n\ndata: [DONE]\n\n")
    connections: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while True:  # keep-alive: one chunked event stream per request
                await read_request(reader)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"transfer-encoding: chunked\r\n\r\n")
                for event in body.split(b"\n\n")[:-1]:
                    writer.write(b"%x\r\n%s\n\n\r\n" % (len(event) + 2, event))
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        client = make_client(upstream_base_url=f"http://127.0.0.1:{port}/v1")
        for _ in range(3):
            assert "".join(c.text for c in await stream_all(client, "Hi")) == "Hello"
    assert len(connections) == 1
