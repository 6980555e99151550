"""The checkpointer writes the text of every stream that grew, in one transaction per round,
and nothing for a stream that did not change or has ended."""

from __future__ import annotations

from sqlalchemy import select

from app.answer.records import CallRecord
from app.core.clock import utcnow
from app.process.service import ProcessRegistry
from app.store.db import Database
from app.store.models import LlmCall, Message, UserTokenUsage
from app.turn.holds.checkpoints import Checkpointer
from tests.store.factories import new_thread, open_rows


async def _streaming_row(db: Database) -> Message:
    thread = await new_thread(db)
    return (await open_rows(db, thread, None)).assistant


async def _content(db: Database, row: Message) -> str:
    async with db.transaction() as s:
        found = await s.get(Message, row.id)
    assert found is not None
    return found.content


async def test_changed_streams_are_written_together_and_ended_ones_never(db: Database) -> None:
    first, second = await _streaming_row(db), await _streaming_row(db)
    texts = {first.id: "Hel", second.id: ""}
    checkpoints = Checkpointer(db, interval_s=1.0)
    for row in (first, second):
        checkpoints.track(row.id, lambda mid=row.id: texts[mid])  # type: ignore[misc]
    assert await checkpoints.write_once() == 1  # the empty stream has nothing new
    assert await checkpoints.write_once() == 0  # unchanged: no transaction at all
    texts[first.id], texts[second.id] = "Hello", "Hi"
    assert await checkpoints.write_once() == 2
    assert (await _content(db, first), await _content(db, second)) == ("Hello", "Hi")
    checkpoints.untrack(first.id)
    texts[first.id] = "Hello, world"
    assert await checkpoints.write_once() == 0
    assert await _content(db, first) == "Hello" and checkpoints.tracked == 1


def _call(stage: str, status: str, prompt: int, completion: int) -> CallRecord:
    at = utcnow()
    return CallRecord(stage=stage, model="demo-1", prompt_tokens=prompt,
                      completion_tokens=completion, cost_usd=None,
                      usage_source="provider" if status == "complete" else "partial",
                      started_at=at, finished_at=at, first_token_at=at, status=status)


async def test_the_calls_a_checkpoint_carries_are_billed_once_by_the_dead_process_sweep(
        db: Database) -> None:
    thread = await new_thread(db)
    row = (await open_rows(db, thread, None, process_id="killed")).assistant
    calls = [_call("title", "complete", 30, 5)]
    checkpoints = Checkpointer(db, interval_s=1.0)
    checkpoints.track(row.id, lambda: "", lambda: calls)
    assert await checkpoints.write_once() == 1  # no text yet, but a call was made
    calls.append(_call("main", "interrupted", 100, 7))
    assert await checkpoints.write_once() == 1
    assert await checkpoints.write_once() == 0
    registry = ProcessRegistry(db, heartbeat_s=1.0, dead_after_s=10.0)
    assert await registry.sweep() == 1
    assert await registry.sweep() == 0  # swept and billed once
    async with db.transaction() as s:
        stored = list((await s.execute(select(LlmCall).where(
            LlmCall.message_id == row.id))).scalars())
        [rollup] = (await s.execute(select(UserTokenUsage).where(
            UserTokenUsage.user_id == thread.user_id,
            UserTokenUsage.period_type == "day"))).scalars()
        swept = await s.get(Message, row.id)
    assert sorted((c.stage, c.status, c.error, c.total_tokens) for c in stored) == [
        ("main", "interrupted", "process_died", 107), ("title", "complete", None, 35)]
    assert all(c.thread_id == thread.id for c in stored)
    assert (rollup.total_tokens, rollup.llm_call_count) == (142, 2)
    assert swept is not None and swept.status == "interrupted"
    assert swept.meta["tokens"] == 142 and swept.meta["usage_source"] == "partial"


async def test_a_thinking_stream_whose_process_died_keeps_its_reasoning_and_tokens(
        db: Database) -> None:
    """The reasoning grows before any text: each growth is a checkpoint, and the swept row
    keeps what the user saw of the thinking; its call's reasoning tokens are billed."""
    thread = await new_thread(db)
    row = (await open_rows(db, thread, None, process_id="killed-thinking")).assistant
    seen = {"text": "", "reasoning": "Let me"}
    main = _call("main", "interrupted", 100, 40)
    main.reasoning_tokens = 25
    checkpoints = Checkpointer(db, interval_s=1.0)
    checkpoints.track(row.id, lambda: seen["text"], lambda: [main],
                      reasoning=lambda: seen["reasoning"])
    assert await checkpoints.write_once() == 1
    seen["reasoning"] = "Let me think about it."
    assert await checkpoints.write_once() == 1  # the reasoning alone grew
    assert await checkpoints.write_once() == 0
    seen["text"] = "The ans"
    assert await checkpoints.write_once() == 1
    assert await ProcessRegistry(db, heartbeat_s=1.0, dead_after_s=10.0).sweep() == 1
    async with db.transaction() as s:
        swept = await s.get(Message, row.id)
        [stored] = (await s.execute(select(LlmCall).where(LlmCall.message_id == row.id))
                    ).scalars()
        [rollup] = (await s.execute(select(UserTokenUsage).where(
            UserTokenUsage.user_id == thread.user_id))).scalars()
    assert swept is not None and swept.status == "interrupted"
    assert (swept.content, swept.reasoning) == ("The ans", "Let me think about it.")
    assert stored.reasoning_tokens == 25 and rollup.reasoning_tokens == 25
