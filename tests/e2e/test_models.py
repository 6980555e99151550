"""Several models on several demo model servers, end to end: a models file, a 429 or a
5xx on the first model answered by the second within the same request, and an answer whose
model server dies mid-answer finished by the next one, seamlessly, on the native API and on
/v1 alike, every call billed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from app.demo_llm.scenarios import ChatInput, plan_reply
from app.store.db import Database
from app.store.models import LlmCall
from app.stream import strip_markers
from tests.e2e.helpers import keyed_client, messages, new_thread
from tests.support.gateway import (
    DemoLlm,
    LiveGateway,
    StartGateway,
    clean_env,
    free_port,
    iter_sse,
    post_turn,
    start_demo_llm,
    wait_for_http,
)

PRICES = "{ prompt = 1.0, completion = 2.0 }"


@pytest.fixture
def demos() -> Iterator[list[DemoLlm]]:
    started: list[DemoLlm] = []
    yield started
    for demo in started:
        demo.stop()


def demo(demos: list[DemoLlm], **settings: Any) -> DemoLlm:
    started = start_demo_llm(delay_ms=settings.pop("delay_ms", 0), slow_first_s=1.0,
                             **settings)
    demos.append(started)
    return started


def models_file(tmp_path: Path, first_url: str, second_url: str) -> dict[str, str]:
    """`first` on server a, falling back to `second` on server b; both priced."""
    path = tmp_path / "models.toml"
    path.write_text(f"""
[servers.a]
base_url = "{first_url}"

[servers.b]
base_url = "{second_url}"

[[models]]
name = "first"
server = "a"
model_id = "demo-1"
prices = {PRICES}
fallbacks = ["second"]

[[models]]
name = "second"
server = "b"
model_id = "demo-1"
prices = {PRICES}
""")
    return {"CHATGATE_MODELS_FILE": str(path)}


def demo_answer(user_text: str) -> str:
    """The clean text of the demo model's whole answer to `user_text`."""
    return strip_markers(plan_reply(ChatInput(system="", user_text=user_text)).text).text


async def call_rows(gateway: LiveGateway, message_id: str) -> list[LlmCall]:
    db = Database(gateway.database_url)
    try:
        async with db.transaction() as session:
            result = await session.execute(
                select(LlmCall).where(LlmCall.message_id == uuid.UUID(message_id))
                .order_by(LlmCall.started_at))
            return list(result.scalars())
    finally:
        await db.dispose()


async def metric(gateway: LiveGateway, name: str, **labels: str) -> float:
    return sum(s.value for s in await gateway.samples(name)
               if all(s.labels.get(k) == v for k, v in labels.items()))


async def v1_stream(client: httpx.AsyncClient, model: str, text: str) -> tuple[str, Any]:
    """A /v1 streamed completion: its joined text and its last chunk with choices."""
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": text}]}
    joined, last = "", None
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            assert "error" not in chunk, chunk
            for choice in chunk.get("choices", []):
                joined += choice["delta"].get("content") or ""
                last = choice
    return joined, last


async def test_a_429_on_the_first_model_is_answered_by_the_second_in_one_request(
    live_backend: str, start_gateway: StartGateway, demos: list[DemoLlm], tmp_path: Path
) -> None:
    limited = demo(demos, fail_status=429, retry_after_s=30)
    healthy = demo(demos)
    gateway = start_gateway(live_backend, env=models_file(tmp_path, limited.base_url,
                                                          healthy.base_url))
    text = f"fallback please {uuid.uuid4().hex[:6]}"
    async with await keyed_client(gateway, "picky") as client:
        thread_id = await new_thread(client, "titled")
        result = await post_turn(client, thread_id, text)
        [_, stored] = await messages(client, thread_id)
        ready = (await client.get("/readyz")).json()
        again = await post_turn(client, thread_id, text + " again")
        v1_text, v1_last = await v1_stream(client, "first", text)
    assert result.names[-1] == "message_end" and result.text == demo_answer(text)
    assert stored["status"] == "complete" and stored["content"] == demo_answer(text)
    assert stored["metadata"]["answered_by"] == {"model": "second", "server": "b"}
    calls = stored["metadata"]["processingDetails"]["llm_calls"]
    assert [(c["server"], c["status"]) for c in calls] == [("a", "failed"), ("b", "complete")]
    assert "429" in calls[0]["error"]
    rows = await call_rows(gateway, stored["id"])
    assert [(r.server, r.status) for r in rows] == [("a", "failed"), ("b", "complete")]
    assert rows[0].cost_usd == 0 and rows[1].cost_usd is not None and rows[1].cost_usd > 0
    servers = {s["server"]: s for s in ready["model_servers"]}
    assert servers["a"]["state"] == "cooling_down" and servers["a"]["cooldown_until"]
    assert servers["b"]["state"] == "healthy"
    # while server a cools down (its Retry-After), its model is asked last: not at all
    assert again.names[-1] == "message_end"
    assert len(limited.requests(50)) == 1
    assert (v1_text, v1_last["finish_reason"]) == (demo_answer(text), "stop")
    assert await metric(gateway, "chatgate_model_fallbacks_total", from_model="first",
                        to_model="second") >= 1
    assert await metric(gateway, "chatgate_model_server_failures_total", server="a") == 1


@pytest.mark.parametrize("cut_after", [1, 9, 40])
async def test_an_answer_cut_mid_way_is_finished_by_the_next_model_without_a_seam(
    live_backend: str, start_gateway: StartGateway, demos: list[DemoLlm], tmp_path: Path,
    cut_after: int,
) -> None:
    dying = demo(demos, abort_after=cut_after)
    healthy = demo(demos)
    gateway = start_gateway(live_backend, env=models_file(tmp_path, dying.base_url,
                                                          healthy.base_url))
    text = f"continue me {uuid.uuid4().hex[:6]}"
    async with await keyed_client(gateway, "reader") as client:
        thread_id = await new_thread(client, "titled")
        result = await post_turn(client, thread_id, text)
        [_, stored] = await messages(client, thread_id)
        v1_text, v1_last = await v1_stream(client, "first", text)
        v1_whole = await client.post("/v1/chat/completions", json={
            "model": "first", "messages": [{"role": "user", "content": text}]})
    whole = demo_answer(text)
    assert v1_whole.status_code == 200, v1_whole.text
    assert v1_whole.json()["choices"][0]["message"]["content"] == whole
    assert result.names[-1] == "message_end" and result.one("message_end")["status"] == (
        "complete")
    assert result.text == stored["content"] == whole
    assert stored["status"] == "complete"
    assert "continued_after_failure" in stored["metadata"]["stream"]["warnings"]
    assert stored["metadata"]["answered_by"] == {"model": "second", "server": "b"}
    rows = await call_rows(gateway, stored["id"])
    assert [(r.server, r.status) for r in rows] == [("a", "failed"), ("b", "complete")]
    assert all(r.completion_tokens > 0 and (r.cost_usd or 0) > 0 for r in rows)  # both billed
    # the continuation asked the second server to go on from what the client had seen
    [asked] = [r["body"] for r in healthy.requests(10) if r["body"]["stream"]][-1:]
    assert asked["messages"][-2]["role"] == "assistant"
    assert whole.startswith(asked["messages"][-2]["content"])
    assert (v1_text, v1_last["finish_reason"]) == (whole, "stop")
    assert await metric(gateway, "chatgate_model_continuations_total", from_model="first",
                        to_model="second") == 3


def spawn_demo(port: int, delay_ms: int, log_path: Path) -> subprocess.Popen[bytes]:
    """The demo model server as a process of its own, to be killed mid-answer."""
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.demo_llm", "--port", str(port), "--delay-ms",
             str(delay_ms), "--log-level", "warning"],
            env=clean_env({}), stdout=log_file, stderr=subprocess.STDOUT)
    wait_for_http(f"http://127.0.0.1:{port}/healthz", process, log_path)
    return process


async def test_a_model_server_killed_mid_answer_is_continued_on_the_native_api(
    live_backend: str, start_gateway: StartGateway, demos: list[DemoLlm], tmp_path: Path
) -> None:
    port = free_port()
    doomed = spawn_demo(port, delay_ms=20, log_path=tmp_path / "doomed.log")
    try:
        healthy = demo(demos)
        gateway = start_gateway(live_backend, env=models_file(
            tmp_path, f"http://127.0.0.1:{port}/v1", healthy.base_url))
        text = f"[long] survive the kill {uuid.uuid4().hex[:6]}"
        shown = ""
        async with await keyed_client(gateway, "survivor", over_http=True) as client:
            thread_id = await new_thread(client, "titled")
            async with client.stream("POST", f"/api/threads/{thread_id}/messages",
                                     json={"content": text}) as response:
                async for event in iter_sse(response):
                    if event.event == "delta":
                        shown += event.data["text"]
                        if doomed.poll() is None and len(shown) > 200:
                            doomed.send_signal(signal.SIGKILL)
                    if event.event in ("message_end", "error"):
                        ending = event
                        break
            [_, stored] = await messages(client, thread_id)
    finally:
        if doomed.poll() is None:
            doomed.kill()
        doomed.wait(10)
    whole = demo_answer(text)
    assert ending.event == "message_end" and ending.data["status"] == "complete"
    assert doomed.returncode == -signal.SIGKILL
    assert shown == stored["content"] == whole
    rows = await call_rows(gateway, stored["id"])
    assert [(r.server, r.status) for r in rows] == [("a", "failed"), ("b", "complete")]
    assert all(r.completion_tokens > 0 and (r.cost_usd or 0) > 0 for r in rows)


async def test_a_model_with_no_other_finishes_its_own_answer_after_a_pause(
    live_backend: str, start_gateway: StartGateway, demos: list[DemoLlm], tmp_path: Path
) -> None:
    flaky = demo(demos, abort_after=9)
    path = tmp_path / "solo.toml"
    path.write_text(f'[servers.a]\nbase_url = "{flaky.base_url}"\n\n'
                    '[[models]]\nname = "solo"\nserver = "a"\nmodel_id = "demo-1"\n')
    gateway = start_gateway(live_backend, env={"CHATGATE_MODELS_FILE": str(path)})
    text = f"alone {uuid.uuid4().hex[:6]}"
    async with await keyed_client(gateway, "solo") as client:
        thread_id = await new_thread(client, "titled")
        started = time.monotonic()
        result = await post_turn(client, thread_id, text)
        took = time.monotonic() - started
        [_, stored] = await messages(client, thread_id)
    assert result.text == stored["content"] == demo_answer(text)
    assert stored["status"] == "complete" and took >= 0.5  # the pause before asking again
    rows = await call_rows(gateway, stored["id"])
    assert [(r.server, r.status) for r in rows] == [("a", "failed"), ("a", "complete")]


async def test_without_continuations_a_cut_answer_fails_and_counts_against_its_server(
    live_backend: str, start_gateway: StartGateway, demos: list[DemoLlm], tmp_path: Path
) -> None:
    dying = demo(demos, abort_after=9)
    healthy = demo(demos)
    gateway = start_gateway(live_backend, env={
        **models_file(tmp_path, dying.base_url, healthy.base_url),
        "CHATGATE_MAX_CONTINUATIONS": "0"})
    text = f"no second chance {uuid.uuid4().hex[:6]}"
    async with await keyed_client(gateway, "once") as client:
        thread_id = await new_thread(client, "titled")
        result = await post_turn(client, thread_id, text)
        [_, stored] = await messages(client, thread_id)
    assert result.one("error")["code"] in ("upstream_error", "upstream_truncated")  # a cut body
    assert stored["status"] == "failed" and demo_answer(text).startswith(stored["content"])
    assert 0 < len(stored["content"]) < len(demo_answer(text))
    rows = await call_rows(gateway, stored["id"])
    assert [(r.server, r.status) for r in rows] == [("a", "failed")]
    assert healthy.requests(10) == []
    assert await metric(gateway, "chatgate_model_server_failures_total", server="a") == 1


async def test_each_model_splits_its_answers_with_its_own_reasoning_format(
    live_backend: str, start_gateway: StartGateway, demos: list[DemoLlm], tmp_path: Path
) -> None:
    """The same thinking answer is reasoning under a model whose entry keeps the default
    format, and plain text under one whose entry says `none`."""
    server = demo(demos, think_ms=0)
    path = tmp_path / "models.toml"
    path.write_text(f"""
[servers.a]
base_url = "{server.base_url}"

[[models]]
name = "thinker"
server = "a"
model_id = "demo-1"

[[models]]
name = "literal"
server = "a"
model_id = "demo-1"
reasoning_format = "none"
""")
    gateway = start_gateway(live_backend, env={"CHATGATE_MODELS_FILE": str(path)})
    async with await keyed_client(gateway, "formats") as client:
        thread_id = await new_thread(client, "titled")
        for model in ("thinker", "literal"):
            response = await client.post(f"/api/threads/{thread_id}/messages",
                                         json={"content": "[think] plan it", "model": model})
            assert response.status_code == 200, response.text
        thinker, literal = (m for m in await messages(client, thread_id)
                            if m["role"] == "assistant")
    assert thinker["reasoning"] and "<think>" not in thinker["content"]
    assert literal["reasoning"] is None and literal["content"].startswith("<think>")
    assert thinker["reasoning"] in literal["content"]
