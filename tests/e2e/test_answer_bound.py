"""A live answer is never swept however long it streams, and one that streams past
`max_answer_s` ends `failed` (`answer_too_long`) with its text kept and the client told, on
both APIs.

The sweeps run with settings of a fraction of a second (rows stale after 0.5 s, swept every
0.1 s, heartbeat 0.25 s): a slow model's answer outlives its stale age many times over
before the answer deadline (2.5 s) ends it. Nothing here sleeps for a deadline: the test
reads the stream until the gateway ends it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from app.gateway import main as app_main
from tests.e2e.helpers import keyed_client, messages, new_thread
from tests.support.gateway import DemoLlm, StartGateway, iter_sse

#: ~10 ms a delta on slow_demo_llm: about 9 s of answer, far past the bound.
LONG = "[long] please write a lot"
STALE_S, SWEEP_S, MAX_ANSWER_S = 0.5, 0.1, 2.5
SWEEP_ENV = {
    "CHATGATE_STALE_STREAMING_AFTER_S": str(STALE_S),
    "CHATGATE_HEARTBEAT_S": "0.25",
    # its own fence after 1.5 s: a loaded machine must not fence a live answer
    "CHATGATE_PROCESS_DEAD_AFTER_S": "3.0",
    "CHATGATE_MAX_ANSWER_S": str(MAX_ANSWER_S),
    "CHATGATE_TITLE_CALLS": "false",
    "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "10",
}
#: The moment (from the request) at which the row is stale by age and many sweeps have run.
CHECK_AT_S = STALE_S + 8 * SWEEP_S
TOO_LONG = {"code": "answer_too_long",
            "message": "The answer took longer than the gateway allows and was cut."}


async def _check_live(client: httpx.AsyncClient, thread_id: str) -> None:
    """The row still streams after its stale age, and the thread takes no second turn."""
    assert (await messages(client, thread_id))[-1]["status"] == "streaming"
    second = await client.post(f"/api/threads/{thread_id}/messages", json={"content": "too"})
    assert second.status_code == 409, second.text
    assert second.json()["error"]["code"] == "thread_busy"


async def test_a_live_dripping_answer_is_never_swept_and_ends_answer_too_long(
    live_backend: str, slow_demo_llm: DemoLlm, start_gateway: StartGateway,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(app_main, "sweep_interval_s", lambda older_than_s: SWEEP_S)
    gateway = start_gateway(live_backend, upstream=slow_demo_llm, env=SWEEP_ENV)
    async with await keyed_client(gateway, "dripper", over_http=True) as client:
        thread_id = await new_thread(client)
        started, checks, text, names = time.monotonic(), 0, "", []
        last: dict[str, Any] = {}
        async with client.stream("POST", f"/api/threads/{thread_id}/messages",
                                 json={"content": LONG}) as response:
            async for event in iter_sse(response):
                names.append(event.event)
                if event.event == "delta":
                    text += event.data["text"]
                    # checks while the bound is still well ahead: a delta read late on a
                    # loaded machine may come after the bound cut the answer
                    elapsed = time.monotonic() - started
                    if CHECK_AT_S * (checks + 1) < elapsed < MAX_ANSWER_S - 0.5:
                        await _check_live(client, thread_id)
                        checks += 1
                last = event.data
        took = time.monotonic() - started
        rows = await messages(client, thread_id)
    assert checks >= 1, "the answer ended before its stale age"
    assert names[-1] == "error" and last == TOO_LONG
    # room for a loaded machine; the whole answer would take about 9 s
    assert MAX_ANSWER_S <= took < MAX_ANSWER_S + 4.0, took
    assert rows[-1]["status"] == "failed" and rows[-1]["content"] == text != ""
    assert rows[-1]["metadata"]["error"] == TOO_LONG
    assert "interrupted_reason" not in rows[-1]["metadata"]


async def test_a_v1_answer_past_the_bound_is_an_openai_error(
    live_backend: str, slow_demo_llm: DemoLlm, start_gateway: StartGateway,
) -> None:
    gateway = start_gateway(live_backend, upstream=slow_demo_llm, env=SWEEP_ENV)
    async with await keyed_client(gateway, "dripper-v1", over_http=True) as client:
        model = (await client.get("/v1/models")).json()["data"][0]["id"]
        ask = {"model": model, "messages": [{"role": "user", "content": LONG}]}
        # side by side: each runs until the bound cuts it
        whole, streamed = await asyncio.gather(
            client.post("/v1/chat/completions", json=ask),
            client.post("/v1/chat/completions", json={**ask, "stream": True}))
    assert whole.status_code == 504, whole.text
    assert whole.json()["error"]["code"] == "answer_too_long"
    data = [line[len("data: "):] for line in streamed.text.splitlines()
            if line.startswith("data: ")]
    assert data[-1].startswith('{"error"') and '"answer_too_long"' in data[-1]
