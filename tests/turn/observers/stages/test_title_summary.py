"""The title and summary stages: their pure parts, and turns run in-process against a real
database (both backends) and a real model server over HTTP (the demo server, or a silent
one that never answers). The HTTP-level behaviour is in tests/e2e/test_usage_accounting.py."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import structlog
from sqlalchemy import select

from app.answer.events import Started
from app.config.settings import Settings
from app.context import ContextItem
from app.gateway.main import build_runtime
from app.gateway.runtime import Runtime
from app.store.models import LlmCall, Message, UserTokenUsage
from app.threads import repository as thread_store
from app.threads import repository as threads_store
from app.turn.native.turn import Turn, open_turn
from app.turn.observers.seam import ContextDraft, TurnHandler, TurnView
from app.turn.observers.stages.summary import (
    clean_summary,
    covered_until,
    dropped_items,
    summary_request,
)
from app.turn.observers.stages.title import TITLE_MAX_CHARS, clean_title
from tests.support.gateway import DemoLlm
from tests.turn.wire import WireEvent, on_the_wire
from tests.usage_accounting.workload import backfill, verify

T0 = dt.datetime(2026, 11, 22, 10, 0, tzinfo=dt.UTC)


# -- pure parts ---------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "title"), [
    ("Repairing a bike", "Repairing a bike"),
    ('"Repairing a bike."', "Repairing a bike"),
    ("Title: **Repairing a bike**\n\nBecause the user asked about bikes.", "Repairing a bike"),
    ("  \n“Prague trip”  ", "Prague trip"),
    ('Bikes <!-- METADATA: {"language": "en"} -->', "Bikes"),
    ('<!-- METADATA: {"language": "en"}\nBikes', "Bikes"),  # the seed bug: no closer
    ('Bikes <!-\x00- METADATA: {"language": "en"} -->', "Bikes"),  # NUL hides no marker
    ("## C# tips", "C# tips"),
    ("# **Bold** heading and `code`", "Bold heading and code"),
    ("Title: *Tides* and [moons](https://example.com)", "Tides and moons"),
    ("---\n\n**Bike repair**", "Bike repair"),  # a rule is no title
    ("\"\" ", None),
    ("", None),
])
def test_clean_title(raw: str, title: str | None) -> None:
    assert clean_title(raw) == title


def test_clean_title_caps_length_at_a_word_boundary() -> None:
    title = clean_title("word " * 60)
    assert title is not None and len(title) <= TITLE_MAX_CHARS
    assert title.endswith("word…")


def test_clean_summary_strips_markers_and_caps() -> None:
    assert clean_summary('They planned a trip.\n<!-- METADATA: {"language": "en"} -->') == (
        "They planned a trip.")
    assert clean_summary("  ") is None
    long = clean_summary("x" * 10_000, max_chars=100)
    assert long is not None and len(long) == 100 and long.endswith("…")


def _items(*contents: str) -> list[ContextItem]:
    return [ContextItem("user" if n % 2 == 0 else "assistant", text,
                        T0 + dt.timedelta(minutes=n)) for n, text in enumerate(contents)]


def test_dropped_items_are_the_oldest_that_do_not_fit() -> None:
    items = _items("a" * 100, "b" * 100, "c" * 100, "d" * 100)
    assert dropped_items(items, budget_chars=10_000) == []
    dropped = dropped_items(items, budget_chars=400)  # each costs ~160 encoded
    assert [i.content[0] for i in dropped] == ["a", "b"]
    assert [i.content[0] for i in dropped_items(items, budget_chars=0)] == list("abcd")


def test_summary_request_carries_previous_summary_and_new_turns() -> None:
    request = summary_request("Earlier: bikes.", _items("tyres?", "Use levers."))
    assert "summar" in request[0]["content"].lower() and request[0]["role"] == "system"
    assert request[1]["content"] == (
        "New messages:\n\nuser: tyres?\n\nassistant: Use levers.\n\n"
        "Summary so far: Earlier: bikes.")


def test_covered_until_reads_the_newest_completed_summary_call() -> None:
    def assistant(minute: int, calls: list[dict[str, Any]]) -> Message:
        return Message(role="assistant", created_at=T0 + dt.timedelta(minutes=minute),
                       meta={"processingDetails": {"llm_calls": calls}})

    done = {"stage": "summary", "status": "complete",
            "details": {"covered_until": (T0 + dt.timedelta(minutes=3)).isoformat()}}
    failed = {"stage": "summary", "status": "failed", "details": {}}
    rows = [assistant(1, [{"stage": "main"}]), assistant(5, [done, {"stage": "main"}]),
            Message(role="user", meta={}), assistant(9, [failed, {"stage": "main"}])]
    assert covered_until(rows) == T0 + dt.timedelta(minutes=3)
    assert covered_until(rows[:1]) is None
    assert covered_until([Message(role="assistant", meta={"processingDetails": "junk"})]) is None
    naive = {"stage": "summary", "status": "complete",
             "details": {"covered_until": "2026-01-01T10:00:00"}}
    assert covered_until([assistant(2, [naive])]) is None  # hand-edited: not comparable


# -- turns in-process ---------------------------------------------------------------------

MakeRuntime = Callable[..., Runtime]


@pytest.fixture
async def make_runtime(database_url: str) -> AsyncIterator[MakeRuntime]:
    made: list[Runtime] = []

    def make(upstream_base_url: str, **overrides: Any) -> Runtime:
        values: dict[str, Any] = {"upstream_max_retries": 0, "first_token_timeout_s": 5,
                                  **overrides}
        settings = Settings(database_url=database_url, upstream_base_url=upstream_base_url,
                            **values)
        made.append(build_runtime(settings))
        return made[-1]

    yield make
    for rt in made:
        await rt.http.aclose()
        await rt.db.dispose()


async def _turn(rt: Runtime, thread_id: Any, content: str, user: str = "svc"
                ) -> list[WireEvent]:
    turn = await open_turn(rt.turn_deps, user, thread_id, content)
    return [on_the_wire(event) async for event in turn.events()]


async def _new_thread(rt: Runtime, title: str | None = None) -> Any:
    async with rt.db.transaction() as s:
        return await thread_store.create_thread(s, "svc", title)


async def _assistants(rt: Runtime, thread_id: Any) -> list[Message]:
    async with rt.db.transaction() as s:
        rows = await threads_store.visible_history(s, "svc", thread_id)
    return [r for r in rows if r.role == "assistant"]


def _calls(message: Message) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = message.meta["processingDetails"]["llm_calls"]
    return calls


async def test_title_calls_can_be_turned_off(make_runtime: MakeRuntime, demo_llm: DemoLlm) -> None:
    rt = make_runtime(demo_llm.base_url, title_calls=False)
    thread = await _new_thread(rt)
    await _turn(rt, thread.id, "no title please")
    (assistant,) = await _assistants(rt, thread.id)
    assert [c["stage"] for c in _calls(assistant)] == ["main"]
    async with rt.db.transaction() as s:
        reread = await thread_store.get_thread(s, "svc", thread.id)
    assert reread is not None and reread.title is None


async def test_a_failed_summary_is_retried_with_everything_dropped_since(
    make_runtime: MakeRuntime, demo_llm: DemoLlm
) -> None:
    rt = make_runtime(demo_llm.base_url, context_budget_chars=700)
    thread = await _new_thread(rt, "titled")
    # the first question makes every summary call that sees it fail ([title-error])
    contents = ["first [title-error] q", "second q", "third q", "fourth q"]
    for content in contents:
        events = await _turn(rt, thread.id, content)
        assert events[-1].event == "message_end"
    assistants = await _assistants(rt, thread.id)
    summary_calls = [(n, c) for n, a in enumerate(assistants) for c in _calls(a)
                     if c["stage"] == "summary"]
    # the demo fails a summary call only when its request carries [title-error]: every
    # retry still sent the first question, since no summary ever covered it
    assert len(summary_calls) >= 2, "the budget should have overflowed twice"
    assert all(c["status"] == "failed" and c["usage_source"] == "partial"
               for _, c in summary_calls)
    assert all(a.status == "complete" for a in assistants)
    for n, _ in summary_calls:
        assert sum(c["response"]["usage"]["total_tokens"] for c in _calls(assistants[n])) == (
            assistants[n].meta["tokens"])
    async with rt.db.transaction() as s:
        reread = await thread_store.get_thread(s, "svc", thread.id)
    assert reread is not None and reread.summary is None


async def _silent_server() -> tuple[asyncio.Server, str, asyncio.Event]:
    """A model server that accepts connections and never answers; the event is set once a
    request has reached it."""
    heard = asyncio.Event()

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if await reader.read(1):
                heard.set()
            await reader.read()
        finally:
            writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1", heard


async def test_a_title_call_that_times_out_is_recorded_and_bounded(
    make_runtime: MakeRuntime
) -> None:
    server, url, _ = await _silent_server()
    try:
        rt = make_runtime(url, side_call_timeout_s=0.3, first_token_timeout_s=0.3)
        thread = await _new_thread(rt)
        events = await _turn(rt, thread.id, "is anyone there?")
    finally:
        server.close()
    assert events[-1].event == "error" and events[-1].data["code"] == "upstream_timeout"
    (assistant,) = await _assistants(rt, thread.id)
    title, main = _calls(assistant)
    assert (title["stage"], title["status"], title["usage_source"]) == (
        "title", "failed", "partial")
    assert title["error"].startswith("upstream_timeout")
    assert title["response"]["usage"]["prompt_tokens"] > 0  # sent, so estimated
    assert 250 <= title["duration_ms"] < 5000  # cut at 0.3 s, not the default 20 s
    assert (main["stage"], main["status"]) == ("main", "failed")


async def _leave_during_the_title_call(
    turn: Turn, heard: asyncio.Event, meanwhile: Callable[[], Awaitable[None]] | None = None
) -> None:
    """Read the turn until message_start, wait until the (silent) title call reached the
    model server, do `meanwhile`, then leave as a client does: the reading task is
    cancelled."""
    started = asyncio.Event()

    async def consume() -> None:
        async for event in turn.events():
            if isinstance(event, Started):
                started.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), 30)
    await asyncio.wait_for(heard.wait(), 30)
    if meanwhile is not None:
        await meanwhile()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_client_leaving_during_the_title_call_records_it_interrupted(
    make_runtime: MakeRuntime
) -> None:
    server, url, heard = await _silent_server()
    try:
        rt = make_runtime(url, side_call_timeout_s=30)
        thread = await _new_thread(rt)
        turn = await open_turn(rt.turn_deps, "svc", thread.id, "name me, then leave")
        await _leave_during_the_title_call(turn, heard)
    finally:
        server.close()
    (assistant,) = await _assistants(rt, thread.id)
    assert assistant.status == "interrupted" and assistant.content == ""
    (title,) = _calls(assistant)
    assert (title["stage"], title["status"], title["usage_source"]) == (
        "title", "interrupted", "partial")
    assert assistant.meta["tokens"] == title["response"]["usage"]["total_tokens"] > 0
    # the message's figures cover one cut call, not a whole turn: never "estimated"
    assert assistant.meta["usage_source"] == "partial"


async def test_a_thread_deleted_during_the_title_call_bills_one_message_verify_agrees(
    make_runtime: MakeRuntime
) -> None:
    """The lost-message path of a turn without a main call: the thread goes while the title
    call runs, then the client leaves. The title call is billed as the turn's one message,
    and the recomputation from llm_calls (verify, backfill) counts it the same way."""
    server, url, heard = await _silent_server()
    try:
        rt = make_runtime(url, side_call_timeout_s=30)
        thread = await _new_thread(rt)
        turn = await open_turn(rt.turn_deps, "svc", thread.id, "name me; I delete and leave")

        async def delete_the_thread() -> None:
            async with rt.db.transaction() as s:
                assert await thread_store.delete_thread(s, "svc", thread.id)

        await _leave_during_the_title_call(turn, heard, meanwhile=delete_the_thread)
    finally:
        server.close()
    async with rt.db.transaction() as s:
        (title,) = (await s.execute(select(LlmCall))).scalars().all()
        day = title.created_at.date()
        live = [(r.model, r.total_tokens, r.message_count, r.llm_call_count)
                for r in (await s.execute(select(UserTokenUsage))).scalars()]
    assert (title.stage, title.message_id, title.usage_source) == ("title", None, "partial")
    assert live == [(title.model, title.total_tokens, 1, 1)]
    assert await verify(rt.db, day) == []
    await backfill(rt.db, day)
    async with rt.db.transaction() as s:
        again = [(r.model, r.total_tokens, r.message_count, r.llm_call_count)
                 for r in (await s.execute(select(UserTokenUsage))).scalars()]
    assert again == live


class _FailBeforeMain(TurnHandler):
    """A stage after the title that breaks: the turn fails before its main call."""

    def open(self, view: TurnView) -> TurnHandler:
        return self

    async def before_main(self, draft: ContextDraft) -> None:
        raise RuntimeError("a later stage broke")


async def test_a_turn_failing_after_a_complete_title_call_is_partial(
    make_runtime: MakeRuntime, demo_llm: DemoLlm
) -> None:
    """The title call's usage came from the provider, but the turn never reached its main
    call: the message's figures are a part of a turn, and say so."""
    rt = make_runtime(demo_llm.base_url)
    rt.turn_deps.observers.append(_FailBeforeMain())
    thread = await _new_thread(rt)
    events = await _turn(rt, thread.id, "name me, then break")
    assert events[-1].event == "error" and events[-1].data["code"] == "internal_error"
    (usage,) = [e.data for e in events if e.event == "usage"]
    (assistant,) = await _assistants(rt, thread.id)
    (title,) = _calls(assistant)
    assert (title["stage"], title["status"], title["usage_source"]) == (
        "title", "complete", "provider")
    assert assistant.status == "failed"
    assert assistant.meta["usage_source"] == usage["usage_source"] == "partial"
    assert assistant.meta["tokens"] == usage["total_tokens"] > 0


async def test_a_turn_never_started_is_partial_with_an_exact_zero(
    make_runtime: MakeRuntime, demo_llm: DemoLlm
) -> None:
    """Finished before any stage ran (the client left before reading a byte): no call was
    made, so 0 tokens is exact; `partial` says the 0 is not a whole turn's usage."""
    rt = make_runtime(demo_llm.base_url)
    thread = await _new_thread(rt)
    turn = await open_turn(rt.turn_deps, "svc", thread.id, "never asked")
    await turn.finish()
    (assistant,) = await _assistants(rt, thread.id)
    assert assistant.status == "interrupted" and _calls(assistant) == []
    assert (assistant.meta["tokens"], assistant.meta["usage_source"]) == (0, "partial")


async def test_a_titled_turn_logs_no_word_of_the_user_or_the_model(
    make_runtime: MakeRuntime, demo_llm: DemoLlm
) -> None:
    """The title is made of the user's words, the answers of the model's: the logs keep
    their sizes only."""
    rt = make_runtime(demo_llm.base_url)
    thread = await _new_thread(rt)
    with structlog.testing.capture_logs() as logs:
        events = await _turn(rt, thread.id, "Zanzibarian marmalade recipes")
    assert events[-1].event == "message_end"
    async with rt.db.transaction() as s:
        reread = await thread_store.get_thread(s, "svc", thread.id)
    assert reread is not None and reread.title == "Zanzibarian marmalade recipes"
    assert "thread_titled" in [line["event"] for line in logs]
    assert "Zanzibarian" not in repr(logs) and "marmalade" not in repr(logs)
