"""Failure paths end to end: cut connections, dead or slow upstreams, upstream errors, busy
threads, crashes. Each ends with an honest status, never a row stuck in `streaming`."""

from __future__ import annotations

import asyncio

import pytest

from app.gateway import main as app_main
from app.store.db import Database
from app.threads import repository as thread_store
from tests.e2e.helpers import (
    HEADER,
    keyed_client,
    messages,
    new_thread,
    read_then_leave,
    wait_for_status,
    wait_upstream_cancelled,
)
from tests.store.factories import open_rows
from tests.support.crash import FAST_DETECTION_ENV
from tests.support.gateway import (
    DemoLlm,
    InProcessGateway,
    StartGateway,
    StartGatewayProcess,
    free_port,
    iter_sse,
    post_turn,
)

LONG = "[long] please write a lot"


async def test_client_disconnect_interrupts_and_cancels_upstream(
    live_backend: str, slow_demo_llm: DemoLlm, start_gateway: StartGateway
) -> None:
    gateway = start_gateway(live_backend, upstream=slow_demo_llm)
    before = slow_demo_llm.stats()["streams_cancelled"]
    async with await keyed_client(gateway, "leaver", over_http=True) as client:
        thread_id = await new_thread(client, "leaving")  # titled: the main call is the only one
        received = await read_then_leave(client, thread_id, LONG)
        stored = await wait_for_status(client, thread_id, "interrupted")
    await wait_upstream_cancelled(slow_demo_llm, before)
    assert stored["content"].startswith(received)
    assert len(stored["content"]) < 2000  # far from the ~3,000 characters of [long]
    assert stored["metadata"]["usage_source"] == "partial"
    assert stored["metadata"]["tokens"] > 0
    assert [c["status"] for c in stored["metadata"]["processingDetails"]["llm_calls"]] == [
        "interrupted"]
    assert stored["metadata"]["interrupted_reason"] == "client_gone"  # no grace here


async def test_unreachable_upstream_fails_the_turn_and_keeps_the_user_message(
    live_backend: str, start_gateway: StartGateway
) -> None:
    gateway = start_gateway(live_backend, upstream=f"http://127.0.0.1:{free_port()}/v1")
    async with await keyed_client(gateway, "alone") as client:
        thread_id = await new_thread(client)
        result = await post_turn(client, thread_id, "anyone there?")
        rows = await messages(client, thread_id)
    assert result.names == ["message_start", "usage", "error"]
    assert result.one("error")["code"] == "upstream_unavailable"
    assert [(r["role"], r["status"]) for r in rows] == [("user", "complete"),
                                                         ("assistant", "failed")]
    assert rows[0]["content"] == "anyone there?"
    assert rows[1]["content"] == ""
    assert rows[1]["metadata"]["error"]["code"] == "upstream_unavailable"


async def test_slow_first_token_times_out(
    live_backend: str, demo_llm: DemoLlm, start_gateway: StartGateway
) -> None:
    gateway = start_gateway(live_backend, upstream=demo_llm,
                            env={"CHATGATE_FIRST_TOKEN_TIMEOUT_S": "0.5"})
    async with await keyed_client(gateway, "patient") as client:
        thread_id = await new_thread(client)
        result = await post_turn(client, thread_id, "[slow-first] take your time")
        rows = await messages(client, thread_id)
    assert result.one("error")["code"] == "upstream_timeout"
    assert result.of("delta") == []
    assert rows[-1]["status"] == "failed"
    assert rows[-1]["metadata"]["error"]["code"] == "upstream_timeout"


async def test_slow_first_token_within_the_deadline_completes(
    live_backend: str, demo_llm: DemoLlm, start_gateway: StartGateway
) -> None:
    gateway = start_gateway(live_backend, upstream=demo_llm,
                            env={"CHATGATE_FIRST_TOKEN_TIMEOUT_S": "5"})
    async with await keyed_client(gateway, "patient") as client:
        thread_id = await new_thread(client)
        result = await post_turn(client, thread_id, "[slow-first] take your time")
    assert result.one("message_end")["status"] == "complete"
    assert result.text


async def test_error_before_first_token(gateway: InProcessGateway) -> None:
    """On the module's gateway, as the tests below: each turn runs on a thread of its own."""
    async with await keyed_client(gateway, "unlucky") as client:
        thread_id = await new_thread(client)
        result = await post_turn(client, thread_id, "[error-before] hi")
        rows = await messages(client, thread_id)
    assert result.one("error")["code"] == "upstream_error"
    assert rows[-1]["status"] == "failed" and rows[-1]["content"] == ""
    assert rows[0]["content"] == "[error-before] hi"


async def test_error_mid_stream_keeps_the_visible_text(gateway: InProcessGateway) -> None:
    async with await keyed_client(gateway, "unlucky") as client:
        thread_id = await new_thread(client)
        result = await post_turn(client, thread_id, "[error-mid] hi")
        rows = await messages(client, thread_id)
    assert result.names[-1] == "error" and result.one("error")["code"] == "upstream_error"
    assert result.text and HEADER.search(result.text) is None
    assert rows[-1]["status"] == "failed"
    assert rows[-1]["content"] == result.text
    assert rows[-1]["metadata"]["usage_source"] == "partial"


@pytest.mark.parametrize(("scenario", "code", "message"), [
    ("[cut-clean]", "upstream_truncated", "The model server's answer broke off before its end."),
    ("[bad-chunk]", "upstream_bad_response",
     "The model server sent an answer the gateway cannot read."),
])
async def test_a_cut_or_malformed_answer_is_failed_with_the_visible_text(
    gateway: InProcessGateway, scenario: str, code: str, message: str,
) -> None:
    async with await keyed_client(gateway, "unlucky") as client:
        thread_id = await new_thread(client)
        result = await post_turn(client, thread_id, f"{scenario} hi")
        rows = await messages(client, thread_id)
    assert result.names[-1] == "error"
    assert result.one("error") == {"code": code, "message": message}
    assert result.text.startswith("Here is what I can tell you")
    assert rows[-1]["status"] == "failed" and rows[-1]["content"] == result.text
    assert rows[-1]["metadata"]["error"] == {"code": code, "message": message}


async def test_second_stream_on_a_busy_thread_is_409(
    live_backend: str, slow_demo_llm: DemoLlm, start_gateway: StartGateway
) -> None:
    gateway = start_gateway(live_backend, upstream=slow_demo_llm)
    async with await keyed_client(gateway, "eager", over_http=True) as client:
        thread_id = await new_thread(client)
        async with client.stream("POST", f"/api/threads/{thread_id}/messages",
                                 json={"content": LONG}) as response:
            events = iter_sse(response)  # held: a dropped iterator would close the response
            async for event in events:
                if event.event == "delta":
                    break
            second = await client.post(f"/api/threads/{thread_id}/messages",
                                       json={"content": "me too"})
            assert second.status_code == 409
            assert second.json()["error"]["code"] == "thread_busy"
            assert (await messages(client, thread_id))[-1]["status"] == "streaming"
        await wait_for_status(client, thread_id, "interrupted")
        rows = await messages(client, thread_id)
        assert [r["content"] for r in rows if r["role"] == "user"] == [LONG]
        # the thread is free again
        again = await post_turn(client, thread_id, "now me")
        assert again.one("message_end")["status"] == "complete"


async def test_crash_mid_stream_then_restart_marks_the_row_interrupted(
    live_backend: str, slow_demo_llm: DemoLlm, start_gateway: StartGateway,
    start_gateway_process: StartGatewayProcess,
) -> None:
    # A real process to SIGKILL; the one started after it sweeps its row once the dead
    # process's heartbeat is older than dead_after (the age sweep, even at 0 s, never touches
    # a row a process claims: that process may be alive and streaming). On PostgreSQL the
    # dead process's own lease bounds the takeover too: its short settings keep that wait
    # to seconds.
    first = start_gateway_process(live_backend, upstream=slow_demo_llm, env=FAST_DETECTION_ENV)
    key = await first.api_key("crash")
    async with first.client(key) as client:
        thread_id = await new_thread(client)
        async with client.stream("POST", f"/api/threads/{thread_id}/messages",
                                 json={"content": LONG}) as response:
            async for event in iter_sse(response):
                if event.event == "delta":
                    first.kill9()
                    break
    second = start_gateway(live_backend, upstream=slow_demo_llm,
                           database_url=first.database_url,
                           env={"CHATGATE_STALE_STREAMING_AFTER_S": "0",
                                "CHATGATE_HEARTBEAT_S": "0.25",
                                "CHATGATE_PROCESS_DEAD_AFTER_S": "1"})
    async with second.client(key) as client:
        last = await wait_for_status(client, thread_id, "interrupted")
        rows = await messages(client, thread_id)
    second.stop()  # before the first's pool drops the database they share: a clean stop
    assert [r["status"] for r in rows] == ["complete", "interrupted"]
    assert last["metadata"]["interrupted_reason"] == "process_died"
    assert not any(line.get("event") == "stale_streaming_interrupted"
                   for line in second.logs())


async def test_startup_sweep_respects_the_configured_age(
    live_backend: str, demo_llm: DemoLlm, start_gateway: StartGateway
) -> None:
    from tests.support.databases import drop_database, make_fresh_database_url

    url = make_fresh_database_url(live_backend)
    try:
        db = Database(url)
        async with db.transaction() as session:
            thread = await thread_store.create_thread(session, "sweeper", None)
        await open_rows(db, thread, "hi")
        await db.dispose()
        young = start_gateway(live_backend, upstream=demo_llm, database_url=url,
                              env={"CHATGATE_STALE_STREAMING_AFTER_S": "3600"})
        key = await young.api_key("sweeper")
        async with young.client(key) as client:
            assert [r["status"] for r in await messages(client, str(thread.id))] == [
                "complete", "streaming"]
        young.stop()
        await asyncio.sleep(0.01)
        old = start_gateway(live_backend, upstream=demo_llm, database_url=url,
                            env={"CHATGATE_STALE_STREAMING_AFTER_S": "0"})
        async with old.client(key) as client:
            assert [r["status"] for r in await messages(client, str(thread.id))] == [
                "complete", "interrupted"]
    finally:
        drop_database(url)




async def test_periodic_sweep_frees_a_row_stuck_while_the_gateway_runs(
    live_backend: str, demo_llm: DemoLlm, start_gateway: StartGateway,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A row left `streaming` after start-up (a peer process died, or its finish could not be
    stored) must not keep its thread busy (409) until the next restart."""
    # The sweep repeats every sweep_interval_s(age) (5 s at this age: tests/gateway/test_main.py);
    # here every 0.1 s, so the test waits for the row to turn stale, not for the period.
    monkeypatch.setattr(app_main, "sweep_interval_s", lambda older_than_s: 0.1)
    gateway = start_gateway(live_backend, upstream=demo_llm,
                            env={"CHATGATE_STALE_STREAMING_AFTER_S": "1"})
    db = Database(gateway.database_url)
    try:
        async with db.transaction() as session:
            thread = await thread_store.create_thread(session, "stuck", None)
        await open_rows(db, thread, "hi")
    finally:
        await db.dispose()
    key = await gateway.api_key("stuck")
    async with gateway.client(key) as client:
        assert [r["status"] for r in await messages(client, str(thread.id))] == [
            "complete", "streaming"]
        statuses: list[str] = []
        for _ in range(100):  # the row is stale after 1 s
            await asyncio.sleep(0.1)
            statuses = [r["status"] for r in await messages(client, str(thread.id))]
            if statuses[-1] != "streaming":
                break
        assert statuses == ["complete", "interrupted"]
        answer = await post_turn(client, str(thread.id), "still there?")
        assert answer.events[-1].event == "message_end"
