"""The turn limits at the endpoint, in process, on both backends, against the demo model:
each refusal is a JSON error with Retry-After, comes before anything is stored or sent
upstream, is logged in one line and counted in /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from redis.exceptions import RedisError

from app.keys import limits_repository as limits
from app.keys.rate_windows import RedisRateWindows
from app.keys.service import Principal
from app.threads import repository as threads
from app.turn.admission.gate import window_start
from app.turn.holds.slots import TurnRefused
from app.turn.native.turn import Turn
from app.turn.run.completion import CompletionCall, CompletionRequest, open_completion
from app.usage import repository as usage
from tests.e2e.helpers import messages, new_thread
from tests.store.factories import bill, spent
from tests.support.gateway import (
    DemoLlm,
    FakeClock,
    SameLoopGateway,
    SseEvent,
    parse_sse,
    same_loop_gateway,
)
from tests.support.redis_keys import REDIS_URL, redis_missing
from tests.support.scripted_upstream import finish_chunk, read_request, sse_body, usage_chunk
from tests.support.statements import recorded_statements, statements_in_transaction

ASK = [{"role": "user", "content": "Hello"}]
NOON = dt.datetime(2026, 11, 24, 12, 0, 45, tzinfo=dt.UTC)


@dataclass
class Answer:
    status: int
    headers: httpx.Headers
    body: Any
    events: list[SseEvent]

    @property
    def code(self) -> str:
        return str(self.body["error"]["code"])

    @property
    def last_event(self) -> str:
        return self.events[-1].event


async def post(client: httpx.AsyncClient, thread_id: str, content: str = "Hello") -> Answer:
    response = await client.post(f"/api/threads/{thread_id}/messages",
                                 json={"content": content})
    if response.headers["content-type"].startswith("text/event-stream"):
        return Answer(response.status_code, response.headers, None, parse_sse(response.text))
    return Answer(response.status_code, response.headers, response.json(), [])


def refusal_logs(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()
             if line.startswith("{")]
    return [line for line in lines if line.get("event") == "turn_refused"]


async def finish_all(turns: list[Turn]) -> None:
    for turn in turns:
        await turn.finish()


async def test_a_user_at_the_stream_cap_is_refused_before_any_upstream_call(
    database_url: str, demo_llm: DemoLlm, capsys: pytest.CaptureFixture[str]
) -> None:
    async with same_loop_gateway(database_url, demo_llm, max_streams_per_user=2) as gw:
        alice, bob = await gw.api_key("alice"), await gw.api_key("bob")
        async with gw.client(alice) as client:
            threads = [await new_thread(client) for _ in range(3)]
            held = [await gw.hold_turn("alice", t) for t in threads[:2]]
            upstream_before = demo_llm.stats()["requests"]
            capsys.readouterr()

            answer = await post(client, threads[2])
            assert answer.status == 429 and answer.code == "too_many_streams"
            assert answer.headers["retry-after"] == "5"
            assert "2 answers streaming" in answer.body["error"]["message"]
            assert demo_llm.stats()["requests"] == upstream_before
            assert await messages(client, threads[2]) == []  # nothing stored
            [line] = refusal_logs(capsys)
            assert (line["user_id"], line["code"], line["level"]) == (
                "alice", "too_many_streams", "warning")
            assert "exception" not in line

            async with gw.client(bob) as other:  # another user is not affected
                assert (await post(other, await new_thread(other))).last_event == "message_end"
            await held[0].finish()  # one stream ends: alice may start another
            assert (await post(client, threads[2])).last_event == "message_end"
            await finish_all(held[1:])
        assert await gw.refusals() == {"too_many_streams": 1}


async def test_the_stream_cap_costs_an_opening_no_statement_of_its_own_on_postgresql(
    database_url: str, demo_llm: DemoLlm
) -> None:
    """The cap's lock and count run inside the opening's one statement on PostgreSQL, which
    runs outside a transaction: its only round trip on the way to the first delta. On
    SQLite, where statements make none, the count is a statement of its own. (The rate
    limit, off here, counts in a statement of its own before.)"""
    async with same_loop_gateway(database_url, demo_llm, max_streams_per_user=2,
                                 rate_limit_per_minute=0) as gw:
        alice = await gw.api_key("alice")
        async with gw.client(alice) as client:
            threads = [await new_thread(client) for _ in range(2)]
            held = [await gw.hold_turn("alice", threads[0])]
            on_postgresql = gw.runtime.db.backend == "postgresql"
            recorded = (statements_in_transaction if on_postgresql else recorded_statements)
            with recorded(gw.runtime.db) as statements:
                held.append(await gw.hold_turn("alice", threads[1]))
            await finish_all(held)
    if on_postgresql:
        assert statements == [("WITH", False)]  # False: outside a transaction
    else:
        assert [kind for kind, _ in statements if kind != "BEGIN"] == [
            "WITH", "SELECT", "INSERT", "UPDATE", "SELECT"]


async def test_concurrent_openings_of_one_user_stop_at_the_cap(
    database_url: str, demo_llm: DemoLlm
) -> None:
    """Five turns of one user opened at once against a cap of two: each opening stores its
    rows before it counts, so each must count the rows of the ones admitted before it, and
    only its own rows are not counted against it. Exactly two open; the others store
    nothing."""
    async with same_loop_gateway(database_url, demo_llm, max_streams_per_user=2) as gw:
        alice = await gw.api_key("alice")
        async with gw.client(alice) as client:
            threads = [await new_thread(client) for _ in range(5)]
            results = await asyncio.gather(*(gw.hold_turn("alice", t) for t in threads),
                                           return_exceptions=True)
            opened = [r for r in results if isinstance(r, Turn)]
            refused = [r for r in results if isinstance(r, TurnRefused)]
            assert (len(opened), len(refused)) == (2, 3), results
            assert {r.code for r in refused} == {"too_many_streams"}
            async with gw.runtime.db.transaction() as s:
                assert await limits.count_streaming(s, "alice") == 2
            stored = [len(await messages(client, t)) for t in threads]
            assert sorted(stored) == [0, 0, 0, 2, 2]
            await finish_all(opened)


async def test_openai_calls_without_a_thread_count_in_the_stream_cap(
    database_url: str, demo_llm: DemoLlm
) -> None:
    """A call to /v1/chat/completions without a thread stores no streaming row; it still
    takes one of the user's streams while it runs, so one key cannot starve the others."""
    async with same_loop_gateway(database_url, demo_llm, max_streams_per_user=1) as gw:
        alice, bob = await gw.api_key("alice"), await gw.api_key("bob")
        model = gw.runtime.settings.offered_models[0]
        held = await open_completion(gw.runtime.gate, Principal("alice", False),
                                     CompletionRequest(model, ASK), None)
        async with gw.client(alice) as client, gw.client(bob) as other:
            thread_id = await new_thread(client)
            assert (await post(client, thread_id)).code == "too_many_streams"
            refused = await client.post("/v1/chat/completions",
                                        json={"model": model, "messages": ASK})
            assert refused.status_code == 429
            assert refused.json()["error"]["code"] == "too_many_streams"
            answered = await other.post("/v1/chat/completions",
                                        json={"model": model, "messages": ASK})
            assert answered.status_code == 200  # another user is not affected
            await held.finish()  # the call ends: alice may start another
            assert (await post(client, thread_id)).last_event == "message_end"
            again = await client.post("/v1/chat/completions",
                                      json={"model": model, "messages": ASK})
            assert again.status_code == 200
        assert await gw.refusals() == {"too_many_streams": 2}


async def test_the_rate_limit_counts_turn_requests_per_user_and_minute(
    database_url: str, demo_llm: DemoLlm
) -> None:
    clock = FakeClock(NOON)  # 12:00:45: the window ends in 15 s
    async with same_loop_gateway(database_url, demo_llm, rate_limit_per_minute=2) as gw:
        gw.runtime.gate.clock = clock
        async with gw.client(await gw.api_key("alice")) as client:
            thread = await new_thread(client)
            for _ in range(2):
                assert (await post(client, thread)).last_event == "message_end"
            upstream_before = demo_llm.stats()["requests"]
            answer = await post(client, thread)
            assert (answer.status, answer.code) == (429, "rate_limited")
            assert answer.headers["retry-after"] == "15"
            assert demo_llm.stats()["requests"] == upstream_before
            async with gw.client(await gw.api_key("bob")) as other:
                assert (await post(other, await new_thread(other))).last_event == "message_end"

            clock.now = NOON + dt.timedelta(seconds=15)  # the next minute: a new window
            assert (await post(client, thread)).last_event == "message_end"
        assert await gw.refusals() == {"rate_limited": 1}


async def spend(gw: SameLoopGateway, user: str, day: dt.date, tokens: int, cost: str) -> None:
    await bill(gw.runtime.db, user, spent("demo-1", tokens, float(cost)),
               at=dt.datetime.combine(day, dt.time(12), dt.UTC))


async def test_a_key_over_its_daily_budget_is_refused_until_midnight_utc(
    database_url: str, demo_llm: DemoLlm
) -> None:
    clock = FakeClock(dt.datetime(2026, 11, 24, 23, 59, 30, tzinfo=dt.UTC))
    async with same_loop_gateway(database_url, demo_llm) as gw:
        gw.runtime.gate.clock = clock
        by_tokens = await gw.api_key("alice", tokens=1000)
        by_cost = await gw.api_key("alice", cost_usd=0.5)
        unlimited = await gw.api_key("alice")
        await spend(gw, "alice", dt.date(2026, 11, 23), 5000, "9")  # yesterday: not counted
        async with gw.client(by_tokens) as client:
            thread = await new_thread(client)
            assert (await post(client, thread)).last_event == "message_end"
        await spend(gw, "alice", dt.date(2026, 11, 24), 1000, "0.5")
        for key in (by_tokens, by_cost):
            async with gw.client(key) as client:
                answer = await post(client, thread)
                assert (answer.status, answer.code) == (429, "budget_exceeded")
                assert answer.headers["retry-after"] == "30"
        async with gw.client(unlimited) as client:  # the budget is the key's
            assert (await post(client, thread)).last_event == "message_end"
        clock.now += dt.timedelta(seconds=30)  # a new UTC day
        async with gw.client(by_tokens) as client:
            assert (await post(client, thread)).last_event == "message_end"
        assert await gw.refusals() == {"budget_exceeded": 2}


@pytest.mark.parametrize("bound", [
    {"upstream_pool_size": 1, "upstream_slot_timeout_s": 0},
    {"max_opening_turns": 1, "opening_wait_s": 0},
], ids=["upstream_slot", "opening_place"])
async def test_a_turn_past_a_bound_of_the_process_is_gateway_busy_not_an_upstream_timeout(
    database_url: str, demo_llm: DemoLlm, bound: dict[str, float]
) -> None:
    """A held turn has the one upstream slot, or the one opening place (opened, nothing
    sent yet): the next is refused with nothing stored or sent, and opens once it ends."""
    async with same_loop_gateway(database_url, demo_llm, **bound) as gw:
        async with gw.client(await gw.api_key("alice")) as alice, \
                gw.client(await gw.api_key("bob")) as bob:
            held = await gw.hold_turn("alice", await new_thread(alice))
            thread = await new_thread(bob)
            upstream_before = demo_llm.stats()["requests"]
            answer = await post(bob, thread)
            assert (answer.status, answer.code) == (503, "gateway_busy")
            assert answer.headers["retry-after"] == "1"
            assert demo_llm.stats()["requests"] == upstream_before
            assert await messages(bob, thread) == []
            await held.finish()
            # a title call and the answer: the side call rides on the turn's slot and place
            answer = await post(bob, thread)
            assert answer.last_event == "message_end"
            assert demo_llm.stats()["requests"] == upstream_before + 2
            slots = gw.runtime.turn_deps.slots
            assert slots is not None and slots.free == slots.size  # bob's refusal's too
        assert await gw.refusals() == {"gateway_busy": 1}


async def test_a_turn_past_the_opening_places_waits_in_line_and_opens_once_one_frees(
    database_url: str, demo_llm: DemoLlm
) -> None:
    async with same_loop_gateway(database_url, demo_llm, max_opening_turns=1,
                                 opening_wait_s=60, title_calls=False) as gw:
        async with gw.client(await gw.api_key("alice")) as alice, \
                gw.client(await gw.api_key("bob")) as bob:
            held = await gw.hold_turn("alice", await new_thread(alice))
            waiting = asyncio.create_task(post(bob, await new_thread(bob)))
            for _ in range(500):  # until bob's turn is in line (a few ms)
                await asyncio.sleep(0.01)
                if await gw.gauge("chatgate_turns_waiting_to_open") == 1:
                    break
            assert await gw.gauge("chatgate_turns_waiting_to_open") == 1
            assert not waiting.done()
            await held.finish()
            assert (await waiting).last_event == "message_end"
            assert await gw.gauge("chatgate_turns_waiting_to_open") == 0
        assert await gw.refusals() == {}


HELD = "[held]"


#: The first chunk of an answer, as the demo model sends it before its first token.
ROLE = json.dumps({"id": "held", "object": "chat.completion.chunk", "created": 0,
                   "model": "scripted-1", "choices": [
                       {"index": 0, "delta": {"role": "assistant", "content": ""}}]})


@asynccontextmanager
async def holding_model_server(release: asyncio.Event) -> AsyncIterator[tuple[str, list[bytes]]]:
    """A model server in the test's loop: the answer to a request that says HELD is its
    headers and first chunk (the role) at once and the rest once `release` is set (at the
    latest when this ends); any other answer comes whole. Yields its base URL and the
    bodies of the requests so far."""
    seen: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _, request = await read_request(reader)
        seen.append(request)
        first = f"data: {ROLE}\n\n".encode()
        rest = sse_body(["Hello ", "there."], tail=f"data: {finish_chunk()}\n\n"
                        f"data: {usage_chunk(11, 2, 13)}\n\ndata: [DONE]\n\n")
        with contextlib.suppress(ConnectionError):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"content-length: " + str(len(first + rest)).encode() + b"\r\n"
                         b"connection: close\r\n\r\n" + first)
            await writer.drain()
            if HELD.encode() in request:
                await release.wait()
            writer.write(rest)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with server:
        try:
            yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", seen
        finally:
            release.set()


async def test_an_answer_waiting_for_its_first_token_leaves_its_opening_place(
    database_url: str, demo_llm: DemoLlm
) -> None:
    """The model server sends its headers, then holds the first token until the test lets
    it go (a clock would be too short for a loaded machine, or a wait for everyone). The one
    opening place is free again once the headers are in, so another turn opens and ends
    while that answer still waits for its model."""
    release = asyncio.Event()
    # the holding server in the demo model's place; the first token waits as long as it must
    async with holding_model_server(release) as (url, seen), same_loop_gateway(
            database_url, demo_llm, upstream_base_url=url, first_token_timeout_s=60,
            max_opening_turns=1, opening_wait_s=0, title_calls=False) as gw:
        openings = gw.runtime.turn_deps.openings
        assert openings is not None
        async with gw.client(await gw.api_key("alice")) as alice, \
                gw.client(await gw.api_key("bob")) as bob:
            slow_thread, thread = await new_thread(alice), await new_thread(bob)
            slow = asyncio.create_task(post(alice, slow_thread, f"Hi {HELD}"))
            for _ in range(500):  # until the slow answer's headers are in (about 0.1 s)
                await asyncio.sleep(0.01)
                if openings.free == 1 and seen:
                    break
            assert openings.free == 1 and not slow.done()
            assert (await post(bob, thread)).last_event == "message_end"
            assert not slow.done()
            release.set()
            assert (await slow).last_event == "message_end"


async def test_an_openai_style_call_leaves_its_opening_place_once_the_model_answers(
    database_url: str, demo_llm: DemoLlm
) -> None:
    async with same_loop_gateway(database_url, demo_llm, max_opening_turns=1,
                                 opening_wait_s=0) as gw:
        model = gw.runtime.settings.offered_models[0]
        held = await open_completion(gw.runtime.gate, Principal("alice", False),
                                     CompletionRequest(model, ASK), None)  # headers in
        async with gw.client(await gw.api_key("bob")) as bob:
            answered = await bob.post("/v1/chat/completions",
                                      json={"model": model, "messages": ASK})
            assert answered.status_code == 200
        await held.finish()
        assert await gw.refusals() == {}


async def test_the_rate_limit_counts_in_redis_when_configured(
    database_url: str, demo_llm: DemoLlm
) -> None:
    user = f"alice-{uuid.uuid4().hex[:8]}"  # keys of its own (they expire by themselves)
    async with same_loop_gateway(database_url, demo_llm, rate_limit_per_minute=1,
                                 redis_url=REDIS_URL) as gw:
        windows = gw.runtime.gate.windows
        assert isinstance(windows, RedisRateWindows)
        try:
            await windows.client.ping()
        except (OSError, RedisError) as error:
            redis_missing(error)
        gw.runtime.gate.clock = FakeClock(NOON)
        async with gw.client(await gw.api_key(user)) as client:
            thread = await new_thread(client)
            assert (await post(client, thread)).last_event == "message_end"
            answer = await post(client, thread)
            assert (answer.status, answer.code) == (429, "rate_limited")
        assert int(await windows.client.get(windows.key(user, window_start(NOON))) or 0) == 1
        async with gw.runtime.db.transaction() as session:  # nothing counted in the database
            assert await limits.take_request(session, user, window_start(NOON), 1)


async def test_a_turn_and_a_thread_less_call_racing_are_never_both_let_in(
    database_url: str, demo_llm: DemoLlm
) -> None:
    """The stream cap is one check under the user's lock, for answers and open calls alike:
    200 users each open a native turn and a thread-less /v1 call at once against a cap of
    one (the gate's own openings, the endpoints' services); exactly one of each pair is let
    in, and stays open until both are decided."""
    async with same_loop_gateway(database_url, demo_llm, max_streams_per_user=1,
                                 title_calls=False) as gw:
        rt = gw.runtime
        request = CompletionRequest(rt.settings.offered_models[0], ASK)

        async def pair(user: str) -> int:
            async with rt.db.transaction() as session:
                thread = await threads.create_thread(session, user)
            opened = await asyncio.gather(
                gw.hold_turn(user, str(thread.id)),
                open_completion(rt.gate, Principal(user, False), request, None),
                return_exceptions=True)
            let_in = [item for item in opened if isinstance(item, Turn | CompletionCall)]
            refused = [item for item in opened if isinstance(item, TurnRefused)]
            assert len(let_in) + len(refused) == 2, opened
            assert {r.code for r in refused} <= {"too_many_streams"}
            for item in let_in:
                await item.finish()
            return len(let_in)

        admitted: list[int] = []
        for batch in range(8):  # 25 users racing at once
            admitted += await asyncio.gather(*(pair(f"racer{batch}-{n}") for n in range(25)))
        assert admitted == [1] * 200


async def test_a_token_budget_lets_at_most_its_rest_and_a_prompt_through(
    database_url: str, demo_llm: DemoLlm
) -> None:
    """A 300-token budget and a long answer: the answer is cut where the budget ends (its
    `max_tokens` lowered to what is left), not at the model's own 1,024, so the day's usage
    passes the budget by the prompt at most; the next turn is refused. The same on /v1,
    where the client's own larger max_tokens is lowered too."""
    async with same_loop_gateway(database_url, demo_llm, title_calls=False,
                                 summary_calls=False) as gw:
        key = await gw.api_key("alice", tokens=300)
        async with gw.client(key) as client:
            thread = await new_thread(client)
            answer = await post(client, thread, "[long] Tell me everything")
            usage_event = next(e.data for e in answer.events if e.event == "usage")
            assert usage_event["completion_tokens"] <= 300
            refused = await post(client, thread)
            assert (refused.status, refused.code) == (429, "budget_exceeded")
            async with gw.runtime.db.transaction() as session:
                used, _ = await usage.usage_of_day(session, "alice",
                                                    gw.runtime.gate.clock().date())
            assert 300 <= used <= 300 + usage_event["prompt_tokens"]

        bob = await gw.api_key("bob", tokens=300)
        async with gw.client(bob) as client:
            response = await client.post("/v1/chat/completions", json={
                "model": "demo-1", "max_tokens": 5000,
                "messages": [{"role": "user", "content": "[long] Tell me everything"}]})
            assert response.status_code == 200, response.text
            used = response.json()["usage"]
            assert used["completion_tokens"] <= 300
            assert response.json()["choices"][0]["finish_reason"] == "length"
