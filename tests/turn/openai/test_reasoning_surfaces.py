"""Every public reasoning case on the turn's surfaces, over real HTTP from a model server that
sends the case's reasoning field as `delta.reasoning_content` and its content cut at random
places: the native SSE stream shows `reasoning` events then `delta` events (one id count),
and /v1 with the real openai SDK streams `delta.reasoning_content` and returns
`message.reasoning_content` when not streamed.

The cases with another reasoning format need a gateway configured for it; this module's
gateway runs the default (`think`)."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.answer.trace_replay import replay
from app.store.db import Database
from app.turn.rows import traces
from tests.e2e.helpers import messages as thread_messages
from tests.e2e.helpers import new_thread
from tests.stream.streaming import random_pieces
from tests.stream.test_reasoning_conformance import CASES
from tests.support.gateway import GatewayPool, InProcessGateway, StartGateway
from tests.support.gateway.sse import SseEvent, iter_sse, parse_sse, post_turn
from tests.support.http import sdk
from tests.support.scripted_upstream import completion_chunk, finish_chunk, usage_chunk
from tests.turn.openai.model_server import ModelServer, chunk, raw_body

MODEL = "scripted-1"
THINK_CASES = [c for c in CASES if c.get("reasoning_format", "think") == "think"]
IDS = [c["id"] for c in THINK_CASES]


def reasoning_chunk(text: str, field: str = "reasoning_content") -> str:
    return chunk([{"index": 0, "delta": {field: text}, "finish_reason": None}])


def prepare(server: ModelServer, case: dict[str, Any], salt: str) -> str:
    """The case as a reasoning model server streams it: the field deltas, then the content,
    each cut its own random way (seeded by the case, so a failure replays)."""
    key = f"{case['id']}.{salt}"
    rng = random.Random(key)
    field = random_pieces(case.get("reasoning_input", ""), rng, 6)
    content = random_pieces(case["input"], rng, 6)
    name = "reasoning" if rng.random() < 0.3 else "reasoning_content"  # both are read
    events = [reasoning_chunk(piece, name) for piece in field]
    events += [completion_chunk(piece) for piece in content]
    events += [finish_chunk("stop"), usage_chunk(11, 7, 18)]
    server.bodies[key] = raw_body(events)
    return key


def ask(key: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"[case:{key}] think about it"}]


@pytest.mark.parametrize("case", THINK_CASES, ids=IDS)
async def test_native_stream_shows_the_reasoning_then_the_answer(
    oa_gateway: InProcessGateway, model_server: ModelServer, case: dict[str, Any]
) -> None:
    key = prepare(model_server, case, "native")
    async with oa_gateway.client(await oa_gateway.api_key("native-reasoning")) as client:
        thread_id = await new_thread(client)
        result = await post_turn(client, thread_id, ask(key)[0]["content"])
    assert result.status_code == 200, result.raw
    pieces = [e for e in result.events if e.event in ("reasoning", "delta")]
    assert [int(e.id or 0) for e in pieces] == list(range(1, len(pieces) + 1))
    thoughts = [e.data["text"] for e in pieces if e.event == "reasoning"]
    assert "".join(thoughts) == case["reasoning"]
    assert result.text == case["text"]
    names = [e.event for e in pieces]
    if "reasoning" in names and "delta" in names:
        last = len(names) - 1 - names[::-1].index("reasoning")
        assert last < names.index("delta")  # thinking first, then the answer
    end = result.names.index("message_end")
    assert all(result.names.index(n) < end for n in ("reasoning", "delta") if n in names)


async def test_openai_sdk_streams_and_returns_the_reasoning_of_every_case(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    client = sdk(oa_gateway.url + "/v1", await oa_gateway.api_key("sdk-reasoning"))
    async with client:
        for case in THINK_CASES:
            key = prepare(model_server, case, "sdk")
            stream = await client.chat.completions.create(
                model=MODEL, messages=ask(key), stream=True)  # type: ignore[arg-type]
            chunks = [c async for c in stream]
            deltas = [c.choices[0].delta for c in chunks if c.choices]
            thought = "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
            text = "".join(d.content or "" for d in deltas)
            assert (thought, text) == (case["reasoning"], case["text"]), case["id"]
            ext = next((c.model_extra or {})["chatgate"] for c in chunks
                   if "chatgate" in (c.model_extra or {}))
            assert ext["warnings"] == case["warnings"], case["id"]

            whole = await client.chat.completions.create(
                model=MODEL, messages=ask(key))  # type: ignore[arg-type]
            message = whole.choices[0].message
            assert message.content == case["text"], case["id"]
            got = (message.model_extra or {}).get("reasoning_content")
            assert got == (case["reasoning"] or None), case["id"]


async def test_the_wire_body_names_the_field_reasoning_content(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    """What a client that reads the JSON itself gets (not only through the SDK)."""
    [case] = [c for c in CASES if c["id"] == "r-basic"]
    key = prepare(model_server, case, "raw")
    async with oa_gateway.client(await oa_gateway.api_key("raw-reasoning")) as client:
        response = await client.post("/v1/chat/completions", json={
            "model": MODEL, "messages": ask(key)})
        streamed = await client.post("/v1/chat/completions", json={
            "model": MODEL, "messages": ask(key), "stream": True})
    message = response.json()["choices"][0]["message"]
    assert message["reasoning_content"] == "I should greet them."
    assert message["content"] == "Hello!"
    lines = [json.loads(line[6:]) for line in streamed.text.splitlines()
             if line.startswith("data: {")]
    assert "".join(c["choices"][0]["delta"].get("reasoning_content", "")
                   for c in lines if c["choices"]) == "I should greet them."


@pytest.fixture(scope="module")
def resuming(live_backend: str, model_server: ModelServer, live_log_dir: Path
             ) -> Iterator[InProcessGateway]:
    """A gateway whose turns a client may come back to (one for every place a client may
    have dropped at: each test has a thread of its own and reads its turn to the end)."""
    with GatewayPool(live_log_dir) as pool:
        yield pool.start(live_backend, upstream=model_server.base_url, env={
            "CHATGATE_RESUME_GRACE_S": "30", "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "10",
            "CHATGATE_TITLE_CALLS": "false", "CHATGATE_SUMMARY_CALLS": "false",
            "CHATGATE_UPSTREAM_MODEL": "scripted-1"})


@pytest.mark.parametrize("after", ["in_reasoning", "at_the_turn", "in_answer"])
async def test_resume_replays_both_channels_from_the_last_event_id(
    resuming: InProcessGateway, model_server: ModelServer, after: str
) -> None:
    """Last-Event-ID counts reasoning and deltas alike: a client that had events 1..N and
    dropped gets N+1.. of both channels from the running turn's log, each once, whichever
    channel N was."""
    events = [reasoning_chunk(piece) for piece in ["First ", "I ", "plan."]]
    events += [completion_chunk(p) for p in ["<think>", " then ", "more</think>Ans", "wer."]]
    events += [finish_chunk("stop"), usage_chunk(11, 7, 18)]
    key = f"resume.{after}"
    model_server.bodies[key] = raw_body(events)
    model_server.paces[key] = 0.05  # the turn still runs when the client drops
    keep = {"in_reasoning": 1, "at_the_turn": 5, "in_answer": 6}[after]
    async with resuming.client(await resuming.api_key("resume-reasoning"),
                               over_http=True) as client:
        thread_id = await new_thread(client)
        had: list[SseEvent] = []
        async with client.stream("POST", f"/api/threads/{thread_id}/messages",
                                 json={"content": ask(key)[0]["content"]}) as response:
            async for event in iter_sse(response):
                if event.event == "message_start":
                    message_id = event.data["assistant_message_id"]
                elif event.event in ("reasoning", "delta"):
                    had.append(event)
                    if len(had) == keep:
                        break
        async with client.stream(
            "GET", f"/api/threads/{thread_id}/messages/{message_id}/stream",
            headers={"Last-Event-ID": had[-1].id or ""},
        ) as response:
            body = (await response.aread()).decode()
    assert response.status_code == 200, body
    resumed = [e for e in parse_sse(body) if e.event in ("reasoning", "delta")]
    pieces = had + resumed
    assert [int(e.id or 0) for e in pieces] == list(range(1, len(pieces) + 1))
    assert [e.event for e in pieces] == ["reasoning"] * 5 + ["delta"] * 2
    assert "".join(e.data["text"] for e in pieces if e.event == "reasoning") == (
        "First I plan. then more")
    assert "".join(e.data["text"] for e in pieces if e.event == "delta") == "Answer."


async def test_a_traced_reasoning_stream_replays_both_channels(
    start_gateway: StartGateway, live_backend: str, model_server: ModelServer
) -> None:
    """The stream trace of a thinking answer keeps both channels: its replay through the
    same split gives what the client saw, text and reasoning."""
    [case] = [c for c in CASES if c["id"] == "r-field-and-inline"]
    key = prepare(model_server, case, "trace")
    gateway = start_gateway(live_backend, upstream=model_server.base_url, env={
        "CHATGATE_TRACE_STREAMS": "all", "CHATGATE_TITLE_CALLS": "false",
        "CHATGATE_SUMMARY_CALLS": "false", "CHATGATE_UPSTREAM_MODEL": MODEL,
        "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "10"})
    async with gateway.client(await gateway.api_key("tracer")) as client:
        thread_id = await new_thread(client)
        result = await post_turn(client, thread_id, ask(key)[0]["content"])
    message_id = result.one("message_start")["assistant_message_id"]
    db = Database(gateway.database_url)
    try:
        async with db.transaction() as session:
            trace = await traces.load_trace(session, uuid.UUID(message_id))
    finally:
        await db.dispose()
    assert trace is not None
    assert "".join(text for _, text in trace.reasoning_chunks) == case["reasoning_input"]
    replayed = replay(trace)
    shown = "".join(e.data["text"] for e in result.of("reasoning"))
    assert replayed.matches
    assert (replayed.content, replayed.reasoning) == (result.text, shown) == (
        case["text"], case["reasoning"])


async def test_a_running_answers_checkpoint_keeps_the_reasoning_so_far(
    start_gateway: StartGateway, live_backend: str, model_server: ModelServer
) -> None:
    """While a model still thinks, the checkpoint writes what the user saw of the thinking
    into the streaming row (a crash keeps it)."""
    events = [reasoning_chunk(f"step {n}. ") for n in range(40)]
    events += [completion_chunk("Done."), finish_chunk("stop"), usage_chunk(11, 7, 18)]
    key = "checkpoint.thinking"
    model_server.bodies[key] = raw_body(events)
    model_server.paces[key] = 0.05  # two seconds of thinking
    gateway = start_gateway(live_backend, upstream=model_server.base_url, env={
        "CHATGATE_CHECKPOINT_INTERVAL_S": "0.2", "CHATGATE_TITLE_CALLS": "false",
        "CHATGATE_SUMMARY_CALLS": "false", "CHATGATE_UPSTREAM_MODEL": MODEL,
        "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "10"})
    async with gateway.client(await gateway.api_key("checkpointed"), over_http=True) as client:
        thread_id = await new_thread(client)
        seen = ""
        checkpointed: dict[str, Any] | None = None
        async with client.stream("POST", f"/api/threads/{thread_id}/messages",
                                 json={"content": ask(key)[0]["content"]}) as response:
            async for event in iter_sse(response):
                if event.event == "reasoning":
                    seen += event.data["text"]
                if checkpointed is None and len(seen) > 40:
                    rows = await thread_messages(client, thread_id)
                    if rows[-1]["status"] == "streaming" and rows[-1]["reasoning"]:
                        checkpointed = rows[-1]
        stored = (await thread_messages(client, thread_id))[-1]
    assert checkpointed is not None, "no checkpoint of the reasoning while it streamed"
    assert seen.startswith(checkpointed["reasoning"]) and checkpointed["content"] == ""
    assert (stored["status"], stored["content"]) == ("complete", "Done.")
    assert stored["reasoning"] == seen.strip() and stored["reasoning_ms"] >= 0
