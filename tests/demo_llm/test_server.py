"""The demo model server over real loopback HTTP, driven by the real OpenAI SDK."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import httpx
import openai
import pytest

from app.demo_llm import DemoSettings
from app.demo_llm.scenarios import count_tokens, long_answer_text
from tests.demo_llm.conftest import SLOW_FIRST_S
from tests.demo_llm.streaming import CONTEXT, Streamed, stream_chat, user_message

METADATA_EN = '<!-- METADATA: {"language": "en", "sources": [], "awaiting": null} -->'


async def wait_for_stats(http: httpx.AsyncClient, **expected: int) -> dict[str, int]:
    """Poll /v1/_debug/stats until the counters match (the server notices a disconnect async)."""
    deadline = time.monotonic() + 5
    while True:
        stats: dict[str, int] = (await http.get("/v1/_debug/stats")).json()
        if all(stats[k] == v for k, v in expected.items()) or time.monotonic() > deadline:
            return stats
        await asyncio.sleep(0.02)


async def test_default_answer_streams_in_small_pieces_with_metadata_and_usage(
    llm: openai.AsyncOpenAI,
) -> None:
    got = await stream_chat(llm, "How do tides work?")
    assert got.text.startswith("Here is what I can tell you about **How do tides work?**.")
    assert got.text.endswith("Ask me anything else.\n\n" + METADATA_EN)
    assert "MSG_CONTEXT" not in got.text and "history" not in got.text
    assert len(got.deltas) > 20
    assert all(1 <= len(d) <= 6 for d in got.deltas)
    assert len({len(d) for d in got.deltas}) > 3
    assert got.finish_reason == "stop"
    final = got.chunks[-1]
    assert final.choices == [] and final.usage is not None
    assert got.usage is not None
    assert got.usage.completion_tokens == count_tokens(got.text)
    assert got.usage.total_tokens == got.usage.prompt_tokens + got.usage.completion_tokens
    assert got.usage.prompt_tokens > count_tokens(CONTEXT)


async def test_same_question_gives_the_same_pieces(llm: openai.AsyncOpenAI) -> None:
    first = await stream_chat(llm, "Deterministic?")
    second = await stream_chat(llm, "Deterministic?")
    assert first.deltas == second.deltas


async def test_wire_format_is_data_frames_ending_with_done(http: httpx.AsyncClient) -> None:
    body = {"model": "demo-1", "stream": True, "messages": user_message("Hi")}
    response = await http.post("/v1/chat/completions", json=body)
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = response.text.split("\n\n")
    assert frames[-1] == "" and frames[-2] == "data: [DONE]"
    chunks = [json.loads(f.removeprefix("data: ")) for f in frames[:-2]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    # No include_usage asked: no `usage: null` on the content chunks, but the usage chunk
    # comes all the same.
    assert all("usage" not in c for c in chunks[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0


async def test_usage_chunk_even_when_not_asked(llm: openai.AsyncOpenAI) -> None:
    asked = await stream_chat(llm, "Hi")
    got = await stream_chat(llm, "Hi", include_usage=False)
    assert got.usage is not None and got.usage == asked.usage
    assert got.chunks[-1].choices == []
    assert got.chunks[-2].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in got.chunks[:-1])


async def test_no_usage_scenario_ignores_include_usage(llm: openai.AsyncOpenAI) -> None:
    got = await stream_chat(llm, "[no-usage] Hi")
    assert got.usage is None
    assert all(c.choices for c in got.chunks)
    assert got.text.endswith(METADATA_EN)


async def test_seed_bug_sends_echo_and_unclosed_metadata_in_one_chunk(
    llm: openai.AsyncOpenAI,
) -> None:
    got = await stream_chat(llm, "[seed-bug] Ahoj")
    assert got.deltas[0] == CONTEXT + '\n<!-- METADATA: {"language": "cs"}Aha, chápu.'
    rest = "".join(got.deltas[1:])
    assert rest.startswith(" Tohle je ukázková odpověď demo modelu na „Ahoj“.")
    assert rest.endswith("Stačí to takhle?")
    assert "<!--" not in rest and "-->" not in got.text.split("\n", 1)[1]


async def test_no_closer_ends_with_metadata_without_closer(llm: openai.AsyncOpenAI) -> None:
    got = await stream_chat(llm, "[no-closer] Hi")
    unclosed = '\n\n<!-- METADATA: {"language": "en", "sources": [], "awaiting": null}'
    assert got.text.endswith(unclosed)


async def test_split_markers_cuts_at_every_kind_of_boundary(llm: openai.AsyncOpenAI) -> None:
    got = await stream_chat(llm, "[split-markers] Hi")
    d = got.deltas
    assert d[:16] == ["<!", "--", " MS", "G_CONT", "EXT", " ", ":", " ", '{"hist', 'ory": [',
                      "]", "}", " -", "-", ">", "\n"]
    assert d[-14:-6] == ["\n\n<", "!-", "-", " META", "DATA", " ", ":", " "]
    assert "".join(d[-6:-3]) == '{"language": "en", "sources": [], "awaiting": null}'
    assert d[-3:] == [" -", "-", ">"]
    assert got.text.startswith('<!-- MSG_CONTEXT : {"history": []} -->\nHere is what')


async def test_echo_context_repeats_the_block_it_received(llm: openai.AsyncOpenAI) -> None:
    got = await stream_chat(llm, "[echo-context] Hi")
    assert got.deltas[0] == CONTEXT + "\n"
    assert got.text.endswith(METADATA_EN)


async def test_truncated_stops_inside_metadata_with_length(llm: openai.AsyncOpenAI) -> None:
    got = await stream_chat(llm, "[truncated] Hi")
    assert got.text.endswith('\n\n<!-- METADATA: {"language": "en", "sour')
    assert got.finish_reason == "length"
    assert got.usage is not None and got.usage.completion_tokens == count_tokens(got.text)


async def test_error_mid_cuts_the_connection_after_some_text(
    llm: openai.AsyncOpenAI, http: httpx.AsyncClient
) -> None:
    got = Streamed()
    with pytest.raises((httpx.TransportError, openai.APIConnectionError)):
        await stream_chat(llm, "[error-mid] Hi", into=got)
    assert got.text.startswith("Here is what I can tell you")
    assert "<!--" not in got.text
    assert got.finish_reason is None and got.usage is None
    stats = await wait_for_stats(http, streams_aborted=1)
    assert stats["streams_aborted"] == 1 and stats["streams_cancelled"] == 0


async def _frames(http: httpx.AsyncClient, text: str) -> list[str]:
    body = {"model": "demo-1", "stream": True, "messages": user_message(text)}
    response = await http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    return [f.removeprefix("data: ") for f in response.text.split("\n\n") if f]


async def test_cut_clean_ends_the_body_without_finish_usage_or_done(
    http: httpx.AsyncClient,
) -> None:
    frames = await _frames(http, "[cut-clean] Hi")
    chunks = [json.loads(f) for f in frames]  # no [DONE]
    assert all(c["choices"] and c["choices"][0]["finish_reason"] is None for c in chunks)
    text = "".join(c["choices"][0]["delta"]["content"] for c in chunks)
    assert text.startswith("Here is what I can tell you") and "<!--" not in text
    stats = await wait_for_stats(http, streams_aborted=1)
    assert stats["streams_aborted"] == 1


async def test_bad_chunk_sends_a_number_as_content_midway(http: httpx.AsyncClient) -> None:
    frames = await _frames(http, "[bad-chunk] Hi")
    assert frames[-1] == "[DONE]"
    contents = [json.loads(f)["choices"][0]["delta"].get("content") for f in frames[1:-2]]
    assert contents.count(5) == 1 and 0 < contents.index(5) < len(contents) - 1


async def test_error_before_is_a_500_with_an_openai_error_body(
    llm: openai.AsyncOpenAI, http: httpx.AsyncClient
) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        await stream_chat(llm, "[error-before] Hi")
    assert caught.value.status_code == 500
    assert caught.value.body == {
        "message": "The demo model failed before the first token.", "type": "server_error",
        "param": None, "code": "demo_error-before",
    }
    stats = (await http.get("/v1/_debug/stats")).json()
    assert stats["requests"] == 1 and stats["streams_started"] == 0


async def test_slow_first_delays_the_first_token(llm: openai.AsyncOpenAI) -> None:
    started = time.monotonic()
    stream = await llm.chat.completions.create(
        model="demo-1", messages=user_message("[slow-first] Hi"), stream=True,  # type: ignore[arg-type]
    )
    first_content_at = None
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content and first_content_at is None:
            first_content_at = time.monotonic() - started
    assert first_content_at is not None and first_content_at >= SLOW_FIRST_S


async def test_long_answer_has_many_chunks(llm: openai.AsyncOpenAI) -> None:
    got = await stream_chat(llm, "[long] Hi")
    assert got.text == long_answer_text() + "\n\n" + METADATA_EN
    assert len(got.deltas) > 500


@pytest.mark.parametrize("awaiting", ["question", "decision", "task"])
async def test_awaiting_sets_metadata(llm: openai.AsyncOpenAI, awaiting: str) -> None:
    got = await stream_chat(llm, f"[awaiting:{awaiting}] Shall we?")
    assert got.text.endswith(
        f'<!-- METADATA: {{"language": "en", "sources": [], "awaiting": "{awaiting}"}} -->'
    )


async def test_garbled_metadata_at_start(llm: openai.AsyncOpenAI) -> None:
    got = await stream_chat(llm, "[garbled] Hi")
    assert got.text.startswith("<!-- METADATA: language=cs -->Aha, rozumím. Here is what")
    assert got.text.count("<!--") == 1


async def test_html_no_metadata_and_empty(llm: openai.AsyncOpenAI) -> None:
    html = await stream_chat(llm, "[html] Hi")
    assert html.text.startswith("Markup must show as text: <b>bold</b>")
    plain = await stream_chat(llm, "[no-metadata] Hi")
    assert "<!--" not in plain.text and plain.text.endswith("Ask me anything else.")
    empty = await stream_chat(llm, "[empty] Hi")
    assert empty.text == METADATA_EN


async def test_max_tokens_cuts_with_length(llm: openai.AsyncOpenAI) -> None:
    stream = await llm.chat.completions.create(
        model="demo-1", messages=user_message("Hi"), stream=True, max_tokens=5,  # type: ignore[arg-type]
    )
    text, finish = "", None
    async for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert text == "Here is what I can t"  # 5 tokens = 20 characters
    assert finish == "length"


async def test_client_disconnect_is_noticed_and_counted(
    start_demo: Callable[[DemoSettings], str],
) -> None:
    url = start_demo(DemoSettings(delay_ms=2))  # paced: ~900 pieces take well over a second
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        llm = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="demo", http_client=http,
                                 max_retries=0)
        stream = await llm.chat.completions.create(
            model="demo-1", messages=user_message("[long] Hi"), stream=True,  # type: ignore[arg-type]
        )
        received = 0
        async for _ in stream:
            received += 1
            if received == 5:
                break
        await stream.close()
        stats = await wait_for_stats(http, streams_cancelled=1, active_streams=0)
    assert stats["streams_cancelled"] == 1
    assert stats["active_streams"] == 0 and stats["streams_completed"] == 0


async def test_completed_stream_is_not_counted_as_cancelled(
    llm: openai.AsyncOpenAI, http: httpx.AsyncClient
) -> None:
    await stream_chat(llm, "Hi")
    stats = await wait_for_stats(http, streams_completed=1)
    assert stats["streams_completed"] == 1 and stats["streams_cancelled"] == 0


async def test_non_streaming_answer_has_usage(llm: openai.AsyncOpenAI) -> None:
    completion = await llm.chat.completions.create(
        model="demo-1", messages=user_message("How do tides work?"),  # type: ignore[arg-type]
    )
    text = completion.choices[0].message.content or ""
    assert text.startswith("Here is what I can tell you about **How do tides work?**.")
    assert text.endswith(METADATA_EN)
    assert completion.usage is not None
    assert completion.usage.completion_tokens == count_tokens(text)


async def test_non_streaming_title_and_summary(llm: openai.AsyncOpenAI) -> None:
    title = await llm.chat.completions.create(model="demo-1", messages=[
        {"role": "system", "content": "Write a short title for this conversation."},
        {"role": "user", "content": "how do I repair a bike tyre quickly at home?"},
    ])
    assert title.choices[0].message.content == "How do I repair a bike"
    summary = await llm.chat.completions.create(model="demo-1", messages=[
        {"role": "system", "content": "Summarize the conversation in one sentence."},
        {"role": "user", "content": "user: bikes\nassistant: tyres"},
    ])
    assert summary.choices[0].message.content == (
        "The conversation so far is about: user: bikes assistant: tyres"
    )


async def test_title_error_fails_only_title_calls(llm: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.InternalServerError):
        await llm.chat.completions.create(model="demo-1", messages=[
            {"role": "system", "content": "Give a title."},
            {"role": "user", "content": "[title-error] bikes"},
        ])
    got = await stream_chat(llm, "[title-error] bikes")
    assert got.finish_reason == "stop"


async def test_models_and_request_log(llm: openai.AsyncOpenAI, http: httpx.AsyncClient) -> None:
    models = await llm.models.list()
    assert [m.id for m in models.data] == ["demo-1"]
    await stream_chat(llm, "[seed-bug] logged")
    recorded = (await http.get("/v1/_debug/requests", params={"limit": 5})).json()["requests"]
    assert len(recorded) == 1
    assert recorded[0]["scenario"] == "seed-bug" and recorded[0]["stream"] is True
    assert recorded[0]["body"]["stream_options"] == {"include_usage": True}
    assert recorded[0]["body"]["messages"][1]["content"].endswith("[seed-bug] logged")
    assert (await http.post("/v1/_debug/reset")).status_code == 204
    assert (await http.get("/v1/_debug/requests")).json() == {"requests": []}


@pytest.mark.parametrize(
    ("content", "code"),
    [(b"{not json", "invalid_json"), (b'{"messages": []}', "invalid_messages"),
     (b'{"messages": "hi"}', "invalid_messages"), (b"[1]", "invalid_messages")],
)
async def test_bad_requests_get_400_json(
    http: httpx.AsyncClient, content: bytes, code: str
) -> None:
    response = await http.post("/v1/chat/completions", content=content)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
