"""Resumable streams on one gateway: a client that drops comes back with Last-Event-ID and
gets the rest of the answer exactly once; a turn nobody comes back to is stored
`interrupted` once the grace is over; Stop ends a turn now; bad resumes get precise JSON
errors. (Across processes: tests/e2e/test_resume_across_gateways.py.)"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.helpers import (
    HEADER,
    keyed_client,
    new_thread,
    wait_for_status,
    wait_upstream_cancelled,
)
from tests.support.gateway import (
    DemoLlm,
    GatewayPool,
    InProcessGateway,
    StartGateway,
    iter_sse,
    start_demo_llm,
)
from tests.support.resume import delta_ids, delta_text, leave_after, read_first, rest, resume

LONG = "[long] tell me everything"
K = 25
#: How long a test waits for the [long] answer to end: about 3 s at its pace, and past the
#: default 10 s on a loaded machine. A bound, not a pause: the wait ends with the answer.
LONG_ENDS_WITHIN_S = 120.0


@pytest.fixture(scope="module")
def paced_llm() -> Iterator[DemoLlm]:
    """3 ms a delta: a [long] answer (about 900 deltas) streams for a few seconds."""
    demo = start_demo_llm(delay_ms=3, slow_first_s=1.0)
    yield demo
    demo.stop()


RESUMABLE = {"CHATGATE_RESUME_GRACE_S": "30", "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "10"}


def resumable(start_gateway: StartGateway, upstream: DemoLlm, **env: str) -> InProcessGateway:
    """A gateway of the test's own, for a test that changes a setting of resuming."""
    return start_gateway("sqlite", upstream=upstream, env={**RESUMABLE, **env})


@pytest.fixture(scope="module")
def gateway(paced_llm: DemoLlm, live_log_dir: Path) -> Iterator[InProcessGateway]:
    """The module's gateway, for the tests that change no setting of resuming: each has
    users of its own and waits until its turn has ended."""
    with GatewayPool(live_log_dir) as pool:
        yield pool.start("sqlite", upstream=paced_llm, env=RESUMABLE)


async def test_a_client_that_drops_after_k_deltas_gets_the_whole_answer_once(
    gateway: InProcessGateway,
) -> None:
    async with await keyed_client(gateway, "dropper", over_http=True) as client:
        left = await leave_after(client, await new_thread(client, "t"), LONG, K)
        assert [int(e.id or 0) for e in left.deltas] == list(range(1, K + 1))
        status, events, raw = await resume(client, left)
        stored = await wait_for_status(client, left.thread_id, "complete", LONG_ENDS_WITHIN_S)
    assert status == 200
    assert delta_ids(events) == list(range(K + 1, K + 1 + len(delta_ids(events))))
    assert [e.event for e in events if e.event != "delta"] == ["metadata", "usage",
                                                             "message_end"]
    assert events[-1].data == {"message_id": left.message_id, "status": "complete"}
    assert left.text + delta_text(events) == stored["content"]
    assert "Line 40 of the long demo answer" in stored["content"]
    assert not HEADER.search(raw)


async def test_last_event_id_works_as_a_query_parameter_and_no_id_replays_all(
    gateway: InProcessGateway,
) -> None:
    async with await keyed_client(gateway, "query", over_http=True) as client:
        left = await leave_after(client, await new_thread(client, "t"), LONG, K)
        _, by_query, _ = await resume(client, left, query=True)
        _, everything, _ = await resume(client, left, None)
        stored = await wait_for_status(client, left.thread_id, "complete", LONG_ENDS_WITHIN_S)
    assert left.text + delta_text(by_query) == stored["content"]
    assert everything[0].event == "message_start"
    assert everything[0].data["assistant_message_id"] == left.message_id
    assert delta_text(everything) == stored["content"]


async def test_after_message_end_the_log_has_the_rest_then_one_catch_up_event(
    paced_llm: DemoLlm, start_gateway: StartGateway
) -> None:
    gateway = resumable(start_gateway, paced_llm, CHATGATE_RESUME_LOG_KEEP_S="0.5")
    async with await keyed_client(gateway, "late", over_http=True) as client:
        left = await leave_after(client, await new_thread(client, "t"), LONG, K)
        stored = await wait_for_status(client, left.thread_id, "complete", LONG_ENDS_WITHIN_S)
        _, rest, _ = await resume(client, left)  # the turn is over, its log still kept
        assert left.text + delta_text(rest) == stored["content"]
        assert rest[-1].event == "message_end"
        await wait_forgotten(gateway, left.message_id)
        status, events, _ = await resume(client, left)
    assert status == 200
    assert [e.event for e in events] == ["catch_up"]
    message = events[0].data["message"]
    assert message["id"] == left.message_id and message["status"] == "complete"
    assert message["content"] == stored["content"]


async def wait_forgotten(gateway: InProcessGateway, message_id: str) -> None:
    """Until the finished turn's log is dropped (RESUME_LOG_KEEP_S after its end)."""
    runs = gateway.runtime.runs
    for _ in range(200):
        if runs.get(uuid.UUID(message_id)) is None:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the finished turn's log was kept past its time")


async def test_nobody_resuming_within_the_grace_stores_interrupted(
    paced_llm: DemoLlm, start_gateway: StartGateway
) -> None:
    gateway = resumable(start_gateway, paced_llm, CHATGATE_RESUME_GRACE_S="0.2")
    before = paced_llm.stats()["streams_cancelled"]
    async with await keyed_client(gateway, "gone", over_http=True) as client:
        left = await leave_after(client, await new_thread(client, "t"), LONG, K)
        stored = await wait_for_status(client, left.thread_id, "interrupted")
        await wait_upstream_cancelled(paced_llm, before)
        _, rest, _ = await resume(client, left)  # what streamed during the grace
    assert stored["content"].startswith(left.text)
    assert len(left.text) < len(stored["content"]) < 3000  # it went on, then it was cut
    assert stored["metadata"]["usage_source"] == "partial"
    # nobody asked for it (no Stop): its client went and none came back within the grace
    assert stored["metadata"]["interrupted_reason"] == "client_gone"
    assert left.text + delta_text(rest) == stored["content"]
    assert rest[-1].event == "message_end"
    assert rest[-1].data == {"message_id": left.message_id, "status": "interrupted"}
    assert any(line.get("event") == "turn_stopped" and line.get("reason") == "client_gone"
               for line in gateway.logs())


async def test_stop_ends_the_turn_now_and_the_open_stream_says_so(
    paced_llm: DemoLlm, gateway: InProcessGateway
) -> None:
    before = paced_llm.stats()["streams_cancelled"]
    async with await keyed_client(gateway, "stopper", over_http=True) as client:
        thread_id = await new_thread(client, "t")
        async with client.stream("POST", f"/api/threads/{thread_id}/messages",
                                 json={"content": LONG}) as response:
            events = iter_sse(response)
            message_id, seen = await read_first(events, K)
            stop_path = f"/api/threads/{thread_id}/messages/{message_id}/stop"
            stopped = await client.post(stop_path)
            tail = await rest(events)
        stored = await wait_for_status(client, thread_id, "interrupted")
        again = await client.post(stop_path)
        unknown = await client.post(f"/api/threads/{thread_id}/messages/{uuid.uuid4()}/stop")
    assert stopped.status_code == 200
    assert stopped.json() == {"message_id": message_id, "status": "interrupted"}
    assert tail[-1].event == "message_end" and tail[-1].data["status"] == "interrupted"
    assert delta_text(seen) + delta_text(tail) == stored["content"]
    assert stored["metadata"]["interrupted_reason"] == "stop_request"  # the page: "stopped"
    assert len(stored["content"]) < 3000
    await wait_upstream_cancelled(paced_llm, before)
    assert (again.status_code, again.json()["status"]) == (200, "interrupted")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"


async def test_bad_resumes_get_precise_json_errors(
    gateway: InProcessGateway,
) -> None:
    async with await keyed_client(gateway, "owner", over_http=True) as client, \
            await keyed_client(gateway, "stranger", over_http=True) as stranger:
        thread_id = await new_thread(client, "t")
        left = await leave_after(client, thread_id, LONG, K)
        other_thread = await new_thread(client, "other")
        await wait_for_status(client, thread_id, "complete", LONG_ENDS_WITHIN_S)
        path = left.stream_path()
        answers = {
            "unknown message": await client.get(
                f"/api/threads/{thread_id}/messages/{uuid.uuid4()}/stream"),
            "malformed message id": await client.get(
                f"/api/threads/{thread_id}/messages/not-a-uuid/stream"),
            "another thread": await client.get(
                f"/api/threads/{other_thread}/messages/{left.message_id}/stream"),
            "another user": await stranger.get(path),
            "not a number": await client.get(path, headers={"Last-Event-ID": "abc"}),
            "negative": await client.get(path, params={"last_event_id": "-1"}),
            "ahead": await client.get(path, headers={"Last-Event-ID": "100000"}),
        }
    expected = {
        "unknown message": (404, "not_found"), "malformed message id": (404, "not_found"),
        "another thread": (404, "not_found"), "another user": (404, "not_found"),
        "not a number": (400, "invalid_last_event_id"),
        "negative": (400, "invalid_last_event_id"), "ahead": (409, "last_event_id_ahead"),
    }
    got = {name: (r.status_code, r.json()["error"]["code"]) for name, r in answers.items()}
    assert got == expected


async def test_a_resumed_reader_keeps_the_turn_alive_past_the_grace(
    paced_llm: DemoLlm, start_gateway: StartGateway
) -> None:
    """Within the grace, a resume counts as a reader again: the answer is not cut while it
    is read, however long it takes."""
    gateway = resumable(start_gateway, paced_llm, CHATGATE_RESUME_GRACE_S="0.5")
    async with await keyed_client(gateway, "back", over_http=True) as client:
        left = await leave_after(client, await new_thread(client, "t"), LONG, K)
        _, events, _ = await resume(client, left)
        stored = await wait_for_status(client, left.thread_id, "complete", LONG_ENDS_WITHIN_S)
    assert events[-1].data["status"] == "complete"
    assert left.text + delta_text(events) == stored["content"]



async def test_a_resume_behind_what_a_running_turns_log_keeps_is_410(
    paced_llm: DemoLlm, start_gateway: StartGateway
) -> None:
    gateway = resumable(start_gateway, paced_llm, CHATGATE_RESUME_LOG_MAX_EVENTS="100")
    async with await keyed_client(gateway, "slowpoke", over_http=True) as client:
        left = await leave_after(client, await new_thread(client, "t"), LONG, K)
        run = gateway.runtime.runs.get(uuid.UUID(left.message_id))
        assert run is not None
        for _ in range(500):  # until the bounded log dropped the events after K
            if run.log.first > K + 1:
                break
            await asyncio.sleep(0.01)
        status, _, body = await resume(client, left)
        stored = await wait_for_status(client, left.thread_id, "complete", LONG_ENDS_WITHIN_S)
    assert (status, json.loads(body)["error"]["code"]) == (410, "resume_expired")
    assert len(stored["content"]) > 3000  # the refusal did not touch the answer
