"""The turn pipeline in-process: real database (both backends), real demo model server over
HTTP, no SSE. Covers what the HTTP tests cannot see directly: hooks, idempotent finish,
a turn abandoned before it started."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any

import pytest
import structlog
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.events import Delta
from app.answer.finish import TurnOutcome
from app.answer.records import FinishedMessage
from app.config.settings import Settings
from app.core.clock import utcnow
from app.gateway.runtime import Runtime
from app.store.db import Database
from app.store.errors import ThreadBusy
from app.store.models import LlmCall, Thread, UserTokenUsage
from app.threads import repository as thread_store
from app.threads import repository as threads_store
from app.turn.admission.opening import ThreadNotFound
from app.turn.native.turn import open_turn
from app.turn.observers.seam import ContextDraft, TurnHandler, TurnView
from app.turn.rows import FinishedRow
from app.turn.run import persist as turn_store
from app.usage import rollups as usage_rollups
from tests.support.databases import postgres_only, set_connections_allowed
from tests.support.gateway import DemoLlm
from tests.support.runtimes import runtime_of
from tests.support.scripted_upstream import scripted_upstream, sse_body, usage_chunk
from tests.turn.wire import WireEvent, on_the_wire


@asynccontextmanager
async def runtime_on(database_url: str, demo: DemoLlm) -> AsyncIterator[Runtime]:
    async with runtime_of(Settings(database_url=database_url, upstream_base_url=demo.base_url,
                                   upstream_max_retries=0, first_token_timeout_s=5)) as rt:
        yield rt


@pytest.fixture
async def runtime(database_url: str, slow_demo_llm: DemoLlm) -> AsyncIterator[Runtime]:
    """On the demo model at 10 ms a delta: for a test that acts while an answer streams."""
    async with runtime_on(database_url, slow_demo_llm) as rt:
        yield rt


@pytest.fixture
async def quick_runtime(database_url: str, demo_llm: DemoLlm) -> AsyncIterator[Runtime]:
    """On the demo model at full speed: for a test that reads its turns to their end, which
    at 10 ms a delta took a second or two each."""
    async with runtime_on(database_url, demo_llm) as rt:
        yield rt


async def _thread(db: Database, user: str = "svc") -> Any:
    async with db.transaction() as session:
        return await thread_store.create_thread(session, user, None)


async def _rows(db: Database, thread: Any) -> list[Any]:
    async with db.transaction() as session:
        return await threads_store.visible_history(session, thread.user_id, thread.id)


class Spy(TurnHandler):
    """An observer that is its own handler and notes each hook; it sets the summary the
    model is shown."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.views: list[TurnView] = []

    def open(self, view: TurnView) -> TurnHandler:
        self.calls.append("open")
        self.views.append(view)
        return self

    async def before_main(self, draft: ContextDraft) -> None:
        self.calls.append("before_main")
        draft.summary = "SUMMARY <of> earlier & older turns"

    async def in_finish_transaction(
        self, session: AsyncSession, finished: FinishedMessage, outcome: TurnOutcome,
        row: FinishedRow,
    ) -> None:
        self.calls.append(f"in_finish_transaction:{finished.status}")

    async def after_finish(
        self, finished: FinishedMessage, outcome: TurnOutcome, *, stored: bool
    ) -> None:
        self.calls.append(f"after_finish:{stored}")


async def test_hooks_run_in_order_and_before_main_shapes_the_context(
    quick_runtime: Runtime, demo_llm: DemoLlm
) -> None:
    runtime = quick_runtime
    spy = Spy()
    runtime.turn_deps.observers.append(spy)
    thread = await _thread(runtime.db)
    turn = await open_turn(runtime.turn_deps, "svc", thread.id, "short hooks test")
    events = [on_the_wire(event) async for event in turn.events()]
    assert [e.event for e in events][-1] == "message_end"
    assert spy.calls == ["open", "before_main", "in_finish_transaction:complete",
                         "after_finish:True"]
    [view] = spy.views
    assert (view.user_text, view.thread_id, view.message_id) == (
        "short hooks test", thread.id, turn.message_id)
    rows = await _rows(runtime.db, thread)
    deltas = "".join(e.data["text"] for e in events if e.event == "delta")
    assert rows[-1].content == deltas
    sent = demo_llm.requests(5)[-1]["body"]["messages"][-1]["content"]
    body = sent[len("<!-- MSG_CONTEXT: "):sent.index(" -->\n")]
    assert json.loads(body)["summary"] == "SUMMARY <of> earlier & older turns"
    assert "<of>" not in body


async def test_closing_the_iterator_mid_stream_interrupts_and_cancels_upstream(
    runtime: Runtime, slow_demo_llm: DemoLlm
) -> None:
    before = slow_demo_llm.stats()["streams_cancelled"]
    thread = await _thread(runtime.db)
    turn = await open_turn(runtime.turn_deps, "svc", thread.id, "[long] go on")
    events = turn.events()
    seen = ""
    async for event in events:
        if isinstance(event, Delta):
            seen += event.text
            if len(seen) > 20:
                break
    await events.aclose()
    rows = await _rows(runtime.db, thread)
    assert rows[-1].status == "interrupted" and rows[-1].content == seen
    assert rows[-1].meta["usage_source"] == "partial"
    for _ in range(100):
        if slow_demo_llm.stats()["streams_cancelled"] > before:
            break
        await asyncio.sleep(0.05)
    assert slow_demo_llm.stats()["streams_cancelled"] > before


async def test_cancelling_the_task_still_stores_the_turn(runtime: Runtime) -> None:
    thread = await _thread(runtime.db)
    turn = await open_turn(runtime.turn_deps, "svc", thread.id, "[long] cancel me")
    first_delta = asyncio.Event()

    async def consume() -> None:
        async for event in turn.events():
            if isinstance(event, Delta):
                first_delta.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first_delta.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    rows = await _rows(runtime.db, thread)
    assert rows[-1].status == "interrupted" and rows[-1].content


async def test_a_turn_never_started_is_still_finished_once(runtime: Runtime) -> None:
    thread = await _thread(runtime.db)
    turn = await open_turn(runtime.turn_deps, "svc", thread.id, "never streamed")
    await turn.finish()
    await turn.finish()
    rows = await _rows(runtime.db, thread)
    assert [(r.role, r.status, r.content) for r in rows] == [
        ("user", "complete", "never streamed"), ("assistant", "interrupted", "")]
    assert rows[-1].meta["processingDetails"]["llm_calls"] == []


async def test_open_turn_on_a_busy_thread_stores_nothing(runtime: Runtime) -> None:
    thread = await _thread(runtime.db)
    first = await open_turn(runtime.turn_deps, "svc", thread.id, "first")
    with pytest.raises(ThreadBusy):
        await open_turn(runtime.turn_deps, "svc", thread.id, "second")
    await first.finish()
    rows = await _rows(runtime.db, thread)
    assert [r.content for r in rows if r.role == "user"] == ["first"]


@postgres_only("SQLite serialises write transactions; row locks are PostgreSQL's")
async def test_opening_a_turn_holds_its_thread_first(runtime: Runtime) -> None:
    """A user's turn and the follow-up worker's turn on one thread lock the thread row before
    anything else, in one order: two of them racing wait for each other instead of
    deadlocking (a deadlock would be a 500 for the user)."""
    thread = await _thread(runtime.db)
    in_guard, release = asyncio.Event(), asyncio.Event()

    async def guard(_session: AsyncSession, _thread: Any) -> None:
        in_guard.set()
        await release.wait()

    opening = asyncio.create_task(
        open_turn(runtime.turn_deps, "svc", thread.id, "hi", guard=guard))
    await in_guard.wait()  # the opening transaction holds its thread, has stored nothing
    with pytest.raises(DBAPIError, match="could not obtain lock"):
        async with runtime.db.transaction() as session:
            await session.execute(_lock_now(thread.id))
    release.set()
    turn = await opening
    await turn.finish()
    async with runtime.db.transaction() as session:  # and gave it back at commit
        await session.execute(_lock_now(thread.id))


def _lock_now(thread_id: Any) -> Any:
    """The follow-up worker's thread lock, failing at once instead of waiting."""
    return select(Thread.id).where(Thread.id == thread_id).with_for_update(
        key_share=True, nowait=True)


async def test_open_turn_on_a_foreign_thread_is_not_found(runtime: Runtime) -> None:
    thread = await _thread(runtime.db, user="owner")
    with pytest.raises(ThreadNotFound):
        await open_turn(runtime.turn_deps, "intruder", thread.id, "hi")
    assert await _rows(runtime.db, thread) == []


@asynccontextmanager
async def scripted_runtime(
    database_url: str, texts: list[str], *, body: bytes | None = None
) -> AsyncIterator[Runtime]:
    """A runtime whose model server streams exactly `texts`, or the raw SSE `body` (no title
    call)."""
    async with (
        scripted_upstream(sse_body(texts) if body is None else body) as base_url,
        runtime_of(Settings(database_url=database_url, upstream_base_url=base_url,
                            upstream_max_retries=0, title_calls=False)) as rt,
    ):
        yield rt


async def _run_turn(rt: Runtime) -> tuple[str, Any]:
    """(the text of the deltas, the stored assistant row) of one turn."""
    thread = await _thread(rt.db)
    turn = await open_turn(rt.turn_deps, "svc", thread.id, "hi")
    events = [on_the_wire(event) async for event in turn.events()]
    assert events[-1].event == "message_end", events[-1]
    rows = await _rows(rt.db, thread)
    return "".join(e.data["text"] for e in events if e.event == "delta"), rows[-1]


@pytest.mark.parametrize("texts", [
    ['Hi <!-\x00- METADATA: {"language": "en"} -->'],
    ["Hi <!-", '\x00- METADATA: {"language": "en"} -->'],
    ["Hi <\x00!-- MSG_CONTEXT: {} -->", '<!-- METADATA: {"language": "en"} -->'],
])
async def test_a_nul_inside_a_marker_cannot_smuggle_it_through(
    database_url: str, texts: list[str]
) -> None:
    """The store removes NUL (PostgreSQL refuses it): the filter must see the text without it,
    or removing it afterwards would join `<!-` and `-` into a live marker."""
    async with scripted_runtime(database_url, texts) as rt:
        sent, stored = await _run_turn(rt)
    assert sent == stored.content == "Hi"
    assert stored.meta["response_metadata"] == {"language": "en"}
    assert stored.meta["sanitized"] == {"nul_removed": 1}


async def test_a_lone_surrogate_is_replaced_live_and_stored_the_same(database_url: str) -> None:
    async with scripted_runtime(database_url, ["broken \ud83d pair", " and more"]) as rt:
        sent, stored = await _run_turn(rt)
    assert sent == stored.content == "broken \ufffd pair and more"
    assert stored.status == "complete"
    assert stored.meta["sanitized"] == {"surrogates_replaced": 1}


@pytest.mark.parametrize(("prompt", "completion", "total"), [
    (10, 5, 15), (-1, 5, 4), (10, 5, 10**12),
])
async def test_an_odd_model_name_or_impossible_usage_never_costs_the_answer(
    database_url: str, prompt: int, completion: int, total: int
) -> None:
    """What a server reports lands in VARCHAR(255) and 32-bit columns (and PostgreSQL refuses
    NUL): the turn is stored whatever it says; impossible counts become an estimate."""
    odd = "model\x00\x07-" + "x" * 400
    body = (sse_body(["Hello there."], model=odd, tail="")
            + f"data: {usage_chunk(prompt, completion, total, odd)}\n\ndata: [DONE]\n\n"
            .encode())
    async with scripted_runtime(database_url, [], body=body) as rt:
        sent, stored = await _run_turn(rt)
        async with rt.db.transaction() as session:
            [call] = (await session.execute(select(LlmCall))).scalars().all()
    assert sent == stored.content == "Hello there." and stored.status == "complete"
    assert call.model == stored.meta["model"] == ("model-" + "x" * 400)[:255]
    plausible = (prompt, completion, total) == (10, 5, 15)
    assert stored.meta["usage_source"] == ("provider" if plausible else "estimated")
    assert (call.total_tokens == 15) is plausible


class BrokenHook(TurnHandler):
    """Writes, then fails, inside the finishing transaction."""

    def open(self, view: TurnView) -> TurnHandler:
        self.thread_id = view.thread_id
        return self

    async def in_finish_transaction(
        self, session: AsyncSession, finished: FinishedMessage, outcome: TurnOutcome,
        row: FinishedRow,
    ) -> None:
        await thread_store.set_title(session, self.thread_id, "written by a broken hook")
        raise RuntimeError("hook failed")


async def test_a_failing_hook_is_rolled_back_alone_and_costs_no_answer(
    quick_runtime: Runtime,
) -> None:
    runtime = quick_runtime
    spy = Spy()
    runtime.turn_deps.observers[:0] = [BrokenHook()]
    runtime.turn_deps.observers.append(spy)
    thread = await _thread(runtime.db)
    turn = await open_turn(runtime.turn_deps, "svc", thread.id, "short answer please")
    events = [on_the_wire(event) async for event in turn.events()]
    assert events[-1].event == "message_end" and events[-1].data["status"] == "complete"
    rows = await _rows(runtime.db, thread)
    assert rows[-1].status == "complete" and rows[-1].content
    assert "in_finish_transaction:complete" in spy.calls  # the hooks after it still ran
    async with runtime.db.transaction() as session:
        stored = await thread_store.get_thread(session, "svc", thread.id)
    assert stored is not None and stored.title != "written by a broken hook"


class BrokenAnnouncer(TurnHandler):
    """Fails once the message is stored (as a bus that cannot send its notice would)."""

    def open(self, view: TurnView) -> TurnHandler:
        return self

    async def after_finish(self, finished: FinishedMessage, outcome: TurnOutcome, *,
                           stored: bool) -> None:
        raise RuntimeError("announcer failed")


async def test_a_failing_announcer_costs_no_answer(quick_runtime: Runtime) -> None:
    runtime = quick_runtime
    runtime.turn_deps.observers[:0] = [BrokenAnnouncer()]
    thread = await _thread(runtime.db)
    with structlog.testing.capture_logs() as logs:
        turn = await open_turn(runtime.turn_deps, "svc", thread.id, "short answer please")
        events = [on_the_wire(event) async for event in turn.events()]
    assert events[-1].event == "message_end" and events[-1].data["status"] == "complete"
    rows = await _rows(runtime.db, thread)
    assert rows[-1].status == "complete" and rows[-1].content
    assert [(line["hook"], line["observer"]) for line in logs
            if line["event"] == "turn_observer_failed"] == [
        ("after_finish", "BrokenAnnouncer")]


async def test_a_thread_deleted_mid_stream_still_bills_the_call(runtime: Runtime) -> None:
    """No message to store, but the model worked: its llm_calls row and the rollup are
    written without a message, and verify still agrees with the raw rows."""
    thread = await _thread(runtime.db, user="deleter")
    turn = await open_turn(runtime.turn_deps, "deleter", thread.id, "[long] keep going")
    async with aclosing(turn.events()) as events:
        async for event in events:
            if isinstance(event, Delta):
                async with runtime.db.transaction() as session:
                    assert await thread_store.delete_thread(session, "deleter", thread.id)
                break
    async with runtime.db.transaction() as session:
        calls = (await session.execute(
            select(LlmCall).where(LlmCall.user_id == "deleter"))).scalars().all()
        rollups = (await session.execute(
            select(UserTokenUsage).where(UserTokenUsage.user_id == "deleter"))).scalars().all()
        day = utcnow().date()
    mismatches = await usage_rollups.verify_day(runtime.db, day)
    assert sorted(c.stage for c in calls) == ["main", "title"]  # a first turn names its thread
    assert {(c.message_id, c.thread_id) for c in calls} == {(None, None)}
    [main] = [c for c in calls if c.stage == "main"]
    assert main.total_tokens > 0 and main.usage_source == "partial"
    assert [r.total_tokens for r in rollups] == [sum(c.total_tokens for c in calls)]
    assert [m for m in mismatches if m.user_id == "deleter"] == []


async def test_a_thread_deleted_mid_stream_tells_the_client_so(quick_runtime: Runtime) -> None:
    """The thread goes as the client reads the first delta: the turn, whose events the
    client pulls, finishes only after, whatever the model's pace."""
    runtime = quick_runtime
    thread = await _thread(runtime.db, user="deleter")
    turn = await open_turn(runtime.turn_deps, "deleter", thread.id, "a short answer please")
    events: list[WireEvent] = []
    with structlog.testing.capture_logs() as logs:
        async with aclosing(turn.events()) as stream:
            async for event in stream:
                if isinstance(event, Delta) and not any(e.event == "delta" for e in events):
                    async with runtime.db.transaction() as session:
                        assert await thread_store.delete_thread(session, "deleter", thread.id)
                events.append(on_the_wire(event))
    assert events[-1].event == "error" and events[-1].data["code"] == "thread_deleted"
    assert not turn.stored
    [summary] = [line for line in logs if line["event"] == "turn_finished"]
    assert summary["stored"] is False


@pytest.mark.parametrize("backend", [pytest.param("postgresql", marks=pytest.mark.postgres)])
async def test_an_answer_finished_during_a_database_outage_is_stored_later(
    database_url: str, demo_llm: DemoLlm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database goes away while the answer streams and stays away through the inline
    attempts: the client is told `storage_error`, and once the database is back the answer
    is stored, complete, with the very text that was sent."""
    monkeypatch.setattr(turn_store, "LATE_STORE_PAUSE_S", 0.2)
    # the inline attempts' pauses, about 5 s in all, waited for nothing: the database is
    # away until the stream has ended, however soon the attempts come
    monkeypatch.setattr(turn_store, "STORE_RETRY_PAUSE_S", 0.005)
    monkeypatch.setattr(turn_store, "STORE_RETRY_PAUSE_MAX_S", 0.02)
    async with runtime_of(Settings(database_url=database_url, upstream_base_url=demo_llm.base_url,
                                   upstream_max_retries=0, title_calls=False)) as rt:
        thread = await _thread(rt.db)
        turn = await open_turn(rt.turn_deps, "svc", thread.id, "a short answer please")
        events = []
        with structlog.testing.capture_logs() as logs:
            try:
                async with aclosing(turn.events()) as stream:
                    async for event in stream:
                        if isinstance(event, Delta) and len(events) == 1:
                            await set_connections_allowed(database_url, False)
                        events.append(on_the_wire(event))
            finally:
                await set_connections_allowed(database_url, True)
            assert events[-1].event == "error" and events[-1].data["code"] == "storage_error"
            sent = "".join(e.data["text"] for e in events if e.event == "delta")
            for _ in range(100):
                rows = await _rows(rt.db, thread)
                if rows[-1].status != "streaming" and turn.stored:
                    break
                await asyncio.sleep(0.1)
        assert (rows[-1].status, rows[-1].content) == ("complete", sent)
        assert turn.stored
        # One summary line for the turn, written when the late store succeeded.
        [summary] = [line for line in logs if line["event"] == "turn_finished"]
        assert summary["stored"] is True
