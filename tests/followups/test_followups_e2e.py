"""Autonomous follow-ups end to end: an in-process gateway on SQLite and on PostgreSQL, the
demo model server as upstream, fast settings (idle 1 s, poll 0.1 s). The worker's clock is
moved by hand (HandClock): a test never sleeps for an idle time or a lease to run out."""

from __future__ import annotations

import asyncio
import datetime
import json
import uuid
from typing import Any

import pytest
from sqlalchemy import select

from app.core.clock import utcnow
from app.followups import queue_repository as followup_queue
from app.followups.triggers import TRIGGER_PROMPTS
from app.store.models import Followup
from tests.e2e.helpers import keyed_client, messages, new_thread
from tests.followups.helpers import (
    HandClock,
    Rows,
    pushed_messages_after_turn,
    set_autonomy,
    wait_until,
)
from tests.support.gateway import DemoLlm, LiveGateway, post_turn

TRIGGERS = {
    "[awaiting:question] Tell me about tides": "question_unanswered",
    "[awaiting:decision] Which database should I pick": "waiting_for_decision",
    "[awaiting:task] Help me set up the project": "task_incomplete",
    "Just saying hello": "check_in",
}
REASONS = {
    "question_unanswered": "No activity for 1 second; assistant awaited an answer to a question",
    "waiting_for_decision": "No activity for 1 second; assistant awaited a decision",
    "task_incomplete": "No activity for 1 second; assistant awaited a task to be done",
    "check_in": "No activity for 1 second; checking in",
}


@pytest.fixture
async def rows(fast_gateway: LiveGateway) -> Any:
    view = Rows(fast_gateway.database_url)
    yield view
    await view.close()


async def _all_settled(rows: Rows, thread_id: str) -> list[Followup] | None:
    followups = await rows.followups(thread_id)
    return followups if all(f.status not in ("pending", "claimed") for f in followups) else None


def upstream_user_text(request: dict[str, Any]) -> str:
    return str(request["body"]["messages"][-1]["content"])


def msg_context(request: dict[str, Any]) -> dict[str, Any]:
    content = upstream_user_text(request)
    start = content.index("<!-- MSG_CONTEXT: ") + len("<!-- MSG_CONTEXT: ")
    end = content.index(" -->\n")
    parsed: dict[str, Any] = json.loads(content[start:end])
    return parsed


async def test_each_trigger_type_follows_up_with_its_exact_prompt(
    fast_gateway: LiveGateway, demo_llm: DemoLlm, rows: Rows, hand_clock: HandClock
) -> None:
    async with await keyed_client(fast_gateway, f"trig-{uuid.uuid4().hex[:6]}") as client:
        threads: dict[str, str] = {}
        for text in TRIGGERS:
            thread_id = await new_thread(client)
            settings = await set_autonomy(client, thread_id, enabled=True, idle_seconds=1,
                                          max_followups=1)
            assert settings["autonomy"] == {"enabled": True, "idle_seconds": 1,
                                            "max_followups": 1}
            threads[text] = thread_id
        hand_clock.advance(1)  # every reply's idle second has passed when it is stored
        results = await asyncio.gather(*(post_turn(client, t, text)
                                          for text, t in threads.items()))
        assert all(r.one("message_end")["status"] == "complete" for r in results)

        for text, thread_id in threads.items():
            trigger = TRIGGERS[text]
            [reply] = await wait_until(lambda t=thread_id: rows.settled_followup_replies(t, 1),
                                       what=f"{trigger} follow-up")
            [prompt] = await rows.synthetic(thread_id)
            assert prompt.role == "user" and prompt.content == TRIGGER_PROMPTS[trigger]  # type: ignore[index]
            assert prompt.trigger_type == trigger
            assert prompt.meta == {"synthetic": True, "trigger_type": trigger,
                                   "trigger_reason": REASONS[trigger]}
            assert reply.status == "complete" and reply.content and reply.synthetic is False
            # The claim is settled just after the reply is stored (a separate transaction).
            [followup] = await wait_until(
                lambda t=thread_id: _all_settled(rows, t), what="settled follow-up")
            assert (followup.status, followup.trigger_type, followup.reason) == (
                "done", trigger, REASONS[trigger])

            visible = await messages(client, thread_id)
            assert [m["role"] for m in visible] == ["user", "assistant", "assistant"]
            assert all(not m["content"].startswith(TRIGGER_PROMPTS[trigger])  # type: ignore[index]
                       for m in visible)
            assert visible[2]["id"] == str(reply.id)
            debug = await messages(client, thread_id, include_synthetic="true")
            assert [m["role"] for m in debug] == ["user", "assistant", "user", "assistant"]
            assert debug[2]["metadata"]["synthetic"] is True

        listed = {t["id"]: t for t in (await client.get("/api/threads")).json()["threads"]}
        for thread_id in threads.values():
            assert listed[thread_id]["message_count"] == 3  # the prompt is never counted
            assert listed[thread_id]["preview"] != TRIGGER_PROMPTS["check_in"]

    # The model saw the synthetic prompt as the user's text: it knows why it speaks.
    sent = [upstream_user_text(r) for r in demo_llm.requests(100)]
    for trigger in TRIGGERS.values():
        assert any(text.endswith("\n" + TRIGGER_PROMPTS[trigger]) for text in sent)  # type: ignore[index]
    logs = fast_gateway.logs()
    assert any(line.get("event") == "history_visibility" and line.get("filtered") == 1
               and line.get("visible") == 3 for line in logs)
    # A follow-up turn has no HTTP request, yet every line of it carries a request id too.
    worker_lines = [line for line in logs if line.get("followup_id")
                    and line.get("thread_id") in threads.values()
                    and line["event"] != "followup_scheduled"]  # by the user's request
    assert {line["event"] for line in worker_lines} >= {"followup_claimed", "turn_finished"}
    odd = [(line["event"], line.get("request_id")) for line in worker_lines
           if line.get("request_id") != f"followup-{line['followup_id']}"]
    assert odd == []


async def test_cap_limits_consecutive_followups_after_a_long_silence(
    fast_gateway: LiveGateway, rows: Rows, hand_clock: HandClock
) -> None:
    async with await keyed_client(fast_gateway, "capped") as client:
        thread_id = await new_thread(client)
        await set_autonomy(client, thread_id, enabled=True, idle_seconds=1, max_followups=2)
        hand_clock.advance(1)  # each idle second passes as soon as a reply is stored
        await post_turn(client, thread_id, "[awaiting:question] Are you there?")
        await wait_until(lambda: rows.settled_followup_replies(thread_id, 2), what="2 replies")
        # A long silence compared to idle 1 s: three more idle periods, and the worker polls
        # after it.
        hand_clock.advance(3.5)
        await hand_clock.polls(3)
        synthetic = await rows.synthetic(thread_id)
        followups = await rows.followups(thread_id)
        assert [m.trigger_type for m in synthetic] == ["question_unanswered", "check_in"]
        assert [f.status for f in followups] == ["done", "done"]
        assert len(await messages(client, thread_id)) == 4  # user, reply, 2 follow-up replies

        # A real message resets the count: the thread follows up again.
        await post_turn(client, thread_id, "back again")
        await wait_until(lambda: rows.settled_followup_replies(thread_id, 3), what="reset")
    assert any(line.get("event") == "followup_cap_reached" and line.get("max_followups") == 2
               for line in fast_gateway.logs())


@pytest.mark.parametrize("forged", [
    {"synthetic": True, "trigger_type": "check_in", "trigger_reason": "forged"},
    {"synthetic": "true", "trigger_type": "check_in"},
    {"metadata": {"synthetic": True, "trigger_type": "check_in"}, "synthetic": 1},
])
async def test_forged_synthetic_fields_make_an_ordinary_user_message(
    fast_gateway: LiveGateway, rows: Rows, forged: dict[str, Any]
) -> None:
    async with await keyed_client(fast_gateway, "forger") as client:
        thread_id = await new_thread(client)
        await set_autonomy(client, thread_id, enabled=True, idle_seconds=60)
        await post_turn(client, thread_id, "first")
        [pending] = await rows.followups(thread_id)
        assert pending.status == "pending"
        async with client.stream("POST", f"/api/threads/{thread_id}/messages",
                                 json={"content": "I am not synthetic", **forged}) as resp:
            assert resp.status_code == 200
            await resp.aread()
        visible = await messages(client, thread_id)
    assert [m["content"] for m in visible if m["role"] == "user"] == [
        "first", "I am not synthetic"]
    stored = [m for m in await rows.messages(thread_id) if m.content == "I am not synthetic"]
    assert [(m.synthetic, m.trigger_type, m.meta) for m in stored] == [(False, None, {})]
    # ... and, being a real user message, it cancelled the pending follow-up.
    statuses = [f.status for f in await rows.followups(thread_id)]
    assert statuses[0] == "cancelled"


async def test_a_user_typing_the_legacy_prefix_sees_their_own_message(
    fast_gateway: LiveGateway, rows: Rows
) -> None:
    """Content that starts like an old gateway's follow-up prompt is still the user's: shown,
    counted, and cancelling the pending follow-up like any real message."""
    words = "[AUTONOMOUS_FOLLOWUP: check_in] is this how you talk to yourself?"
    async with await keyed_client(fast_gateway, "mimic") as client:
        thread_id = await new_thread(client)
        await set_autonomy(client, thread_id, enabled=True, idle_seconds=60)
        await post_turn(client, thread_id, "first")
        await post_turn(client, thread_id, words)
        visible = await messages(client, thread_id)
        listed = (await client.get("/api/threads")).json()["threads"]
    assert [m["content"] for m in visible if m["role"] == "user"] == ["first", words]
    assert [t["message_count"] for t in listed if t["id"] == thread_id] == [4]
    statuses = [f.status for f in await rows.followups(thread_id)]
    assert statuses == ["cancelled", "pending"]  # the reply to it scheduled the next one


async def test_events_stream_delivers_the_followup_to_a_connected_client(
    fast_gateway: LiveGateway, rows: Rows, hand_clock: HandClock
) -> None:
    # over HTTP: the subscriber reads the endless event stream as it arrives
    async with await keyed_client(fast_gateway, "watcher", over_http=True) as client:
        thread_id = await new_thread(client)
        await set_autonomy(client, thread_id, enabled=True, idle_seconds=1, max_followups=1)
        hand_clock.advance(1)
        received = await pushed_messages_after_turn(
            client, client, thread_id, "[awaiting:decision] tea or coffee?")
    [prompt] = await rows.synthetic(thread_id)
    assert [m["role"] for m in received] == ["user", "assistant", "assistant"]
    assert received[0]["content"] == "[awaiting:decision] tea or coffee?"
    followup = received[2]
    assert followup["status"] == "complete" and followup["content"]
    stored = await rows.messages(thread_id)
    assert followup["id"] == str(stored[-1].id) and stored[-2].id == prompt.id
    assert all(m["id"] != str(prompt.id) for m in received)  # the prompt is never pushed


async def test_foreign_and_bad_requests(fast_gateway: LiveGateway) -> None:
    async with await keyed_client(fast_gateway, "owner") as owner, \
            await keyed_client(fast_gateway, "stranger") as stranger:
        thread_id = await new_thread(owner)
        for client, path in ((stranger, thread_id), (owner, str(uuid.uuid4())),
                             (owner, "not-a-uuid")):
            response = await client.patch(f"/api/threads/{path}",
                                          json={"autonomy": {"enabled": True}})
            assert response.status_code == 404
            assert response.json()["error"]["code"] == "not_found"
            events = await client.get(f"/api/threads/{path}/events")
            assert events.status_code == 404 and events.json()["error"]["code"] == "not_found"
        bad_bodies: list[Any] = [
            {}, {"autonomy": {"enabled": "true"}}, {"autonomy": {"idle_seconds": 0}},
            {"autonomy": {"max_followups": -1}}, {"autonomy": {"sneaky": 1}},
            {"autonomy": {}}, {"autonomy": True}, {"autonomy": {"enabled": True}, "title": ""},
        ]
        for body in bad_bodies:
            response = await owner.patch(f"/api/threads/{thread_id}", json=body)
            assert response.status_code == 422, body
            assert set(response.json()["error"]) == {"code", "message"}
        response = await owner.patch(f"/api/threads/{thread_id}", content=b"{nope",
                                     headers={"Content-Type": "application/json"})
        assert response.status_code == 400
        defaults = await set_autonomy(owner, thread_id, max_followups=3)
        assert defaults["autonomy"] == {"enabled": False, "idle_seconds": 300,
                                        "max_followups": 3}
        anonymous = fast_gateway.client()
        async with anonymous:
            assert (await anonymous.get(f"/api/threads/{thread_id}/events")).status_code == 401


async def test_a_user_message_near_the_due_time_leaves_no_followup_after_it(
    fast_gateway: LiveGateway, rows: Rows, hand_clock: HandClock
) -> None:
    """Cancellation race: the user writes within 50 ms of the due time (before, at, after) as
    the worker's clock has it. Whoever wins, no synthetic prompt is ever stored after the
    user's message."""

    async def race(client: Any, offset_s: float) -> None:
        # The last race left the worker's clock ahead of the real one: an hour behind instead,
        # nothing falls due before the race sets its time, however slow the machine.
        hand_clock.set(utcnow() - datetime.timedelta(hours=1))
        thread_id = await new_thread(client)
        await set_autonomy(client, thread_id, enabled=True, idle_seconds=1, max_followups=5)
        await post_turn(client, thread_id, "first")
        [followup] = await rows.followups(thread_id)
        # Later replies schedule an hour away: only the racing follow-up can fire here.
        await set_autonomy(client, thread_id, idle_seconds=3600)
        loop = asyncio.get_running_loop()
        # The worker's now is the due time + offset (and flows on): the user writes at once.
        hand_clock.set(followup.due_at + datetime.timedelta(seconds=offset_s))
        deadline = loop.time() + 10
        while True:  # a follow-up that won the race streams: 409, as for any busy thread
            result = await post_turn(client, thread_id, "I was here all along")
            if result.status_code != 409 or loop.time() > deadline:
                break
            await asyncio.sleep(0.05)
        assert result.one("message_end")["status"] == "complete"
        await hand_clock.polls(3)  # several polls after the reply
        stored = await rows.messages(thread_id)
        [user_message] = [m for m in stored if m.content == "I was here all along"]
        late = [m for m in stored if m.synthetic and m.created_at > user_message.created_at]
        assert late == [], f"offset {offset_s}: follow-up after the user's message"
        [settled] = [f for f in await rows.followups(thread_id) if f.id == followup.id]
        assert settled.status in {"cancelled", "done"}
        if settled.status == "done":  # it ran first: entirely before the user's message
            [prompt] = [m for m in stored if m.synthetic]
            assert prompt.created_at < user_message.created_at

    async with await keyed_client(fast_gateway, "racer") as client:
        for offset in (-0.05, -0.02, 0.0, 0.02, 0.05):  # one worker clock: one race at a time
            await race(client, offset)


async def test_memory_retrieval_puts_an_old_relevant_message_in_msg_context(
    fast_gateway: LiveGateway, demo_llm: DemoLlm, rows: Rows, hand_clock: HandClock
) -> None:
    word = f"quokka{uuid.uuid4().hex[:6]}"
    old_question = f"Tell me about the {word} of Rottnest island"
    async with await keyed_client(fast_gateway, "rememberer") as client:
        thread_id = await new_thread(client)
        await post_turn(client, thread_id, old_question)
        for n in range(4):
            await post_turn(client, thread_id, f"[no-metadata] filler message number {n}")
        await set_autonomy(client, thread_id, enabled=True, idle_seconds=1, max_followups=1)
        hand_clock.advance(1)
        await post_turn(client, thread_id, f"Remind me: what about the {word}?")
        await wait_until(lambda: rows.settled_followup_replies(thread_id, 1), what="follow-up")

    requests = [r for r in demo_llm.requests(200) if word in upstream_user_text(r)
                and r["stream"]]
    real_turn = next(r for r in requests if upstream_user_text(r).endswith(f"the {word}?"))
    context = msg_context(real_turn)
    assert old_question in [m["content"] for m in context["memories"]]
    assert old_question not in [m["content"] for m in context["history"]]  # beyond the window
    assert all(m["role"] in {"user", "assistant"} and m["time"] for m in context["memories"])

    followup_turn = next(r for r in requests if upstream_user_text(r).endswith(
        TRIGGER_PROMPTS["check_in"]))
    followup_context = msg_context(followup_turn)
    assert old_question in [m["content"] for m in followup_context["memories"]]
    recalled = [line for line in fast_gateway.logs() if line.get("event") == "memories_recalled"
                and line.get("thread_id") == thread_id]
    assert [line["source"] for line in recalled][-2:] == ["current_message",
                                                           "last_user_message"]


async def _claimed_by_a_dead_worker(rows: Rows, thread_id: str, attempts: int) -> uuid.UUID:
    """Make the thread's pending follow-up look claimed by a process that died: due, lease
    expired, `attempts` used."""
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)
    async with rows.db.transaction() as s:
        [followup] = (await s.execute(select(Followup).where(
            Followup.thread_id == uuid.UUID(thread_id)))).scalars().all()
        followup.status, followup.claimed_by, followup.attempts = "claimed", "dead", attempts
        followup.due_at = followup.claimed_at = followup.lease_expires_at = past
        return followup.id


async def test_a_dead_workers_claim_is_taken_again_after_its_lease(
    fast_gateway: LiveGateway, rows: Rows
) -> None:
    async with await keyed_client(fast_gateway, "lazarus") as client:
        thread_id = await new_thread(client)
        await set_autonomy(client, thread_id, enabled=True, idle_seconds=3600)
        await post_turn(client, thread_id, "[awaiting:task] install it")
        followup_id = await _claimed_by_a_dead_worker(rows, thread_id, attempts=1)
        await wait_until(lambda: rows.settled_followup_replies(thread_id, 1), what="re-run")
        # The claim is settled just after the reply is stored (a separate transaction).
        await wait_until(lambda: _status(rows, thread_id, followup_id, "done"), what="done")
        [prompt] = await rows.synthetic(thread_id)
        assert prompt.trigger_type == "task_incomplete"
        [followup] = [f for f in await rows.followups(thread_id) if f.id == followup_id]
        assert (followup.status, followup.attempts) == ("done", 2)
        assert followup.claimed_by not in (None, "dead")

        exhausted = await new_thread(client)
        await set_autonomy(client, exhausted, enabled=True, idle_seconds=3600)
        await post_turn(client, exhausted, "hello")
        gone_id = await _claimed_by_a_dead_worker(rows, exhausted, attempts=3)
        await wait_until(
            lambda: _status(rows, exhausted, gone_id, "failed"), what="failed follow-up")
        assert await rows.synthetic(exhausted) == []


async def _status(rows: Rows, thread_id: str, followup_id: uuid.UUID, status: str) -> bool:
    return any(f.id == followup_id and f.status == status
               for f in await rows.followups(thread_id))


async def test_a_followup_on_an_empty_thread_logs_that_memory_has_no_query(
    fast_gateway: LiveGateway, rows: Rows
) -> None:
    async with await keyed_client(fast_gateway, "empty") as client:
        thread_id = await new_thread(client)
        await set_autonomy(client, thread_id, enabled=True, idle_seconds=3600)
    async with rows.db.transaction() as s:
        await followup_queue.schedule_one(
            s, thread_id=uuid.UUID(thread_id), user_id="empty", trigger_type="check_in",
            reason="No activity for 1 second; checking in",
            due_at=datetime.datetime.now(datetime.UTC))
    await wait_until(lambda: rows.settled_followup_replies(thread_id, 1), what="follow-up")
    errors = [line for line in fast_gateway.logs()
              if line.get("event") == "empty thread - no query source"
              and line.get("thread_id") == thread_id]
    assert [line["level"] for line in errors] == ["error"]
