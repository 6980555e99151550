"""First deltas first (app.turn.holds.precedence): while the loop is saturated, streaming turns
wait before their next chunk for the opening ones, never longer than the bound, and nothing
of their text is lost; on a loop with room to spare nothing waits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager

import pytest

from app.answer.events import Delta, Ended
from app.config.settings import Settings
from app.gateway.runtime import Runtime
from app.keys.service import Principal
from app.threads import repository as thread_store
from app.threads import repository as threads_store
from app.turn.holds.precedence import Precedence
from app.turn.native.turn import open_turn
from app.turn.run.completion import CompletionRequest, open_completion
from tests.support.gateway import DemoLlm
from tests.support.runtimes import runtime_of
from tests.support.waits import until


async def test_a_streaming_turn_waits_while_one_opens_on_a_saturated_loop() -> None:
    precedence = Precedence(max_wait_s=60)
    precedence.busy = True
    assert precedence.hold() is None  # nothing is opening

    opening = precedence.opening()
    held = precedence.hold()
    assert held is not None and not held.done()
    opening.close()
    assert held.done()
    opening.close()  # a turn may end from two places: counted once
    assert precedence.openings == 0


async def test_on_a_loop_with_room_to_spare_nothing_waits() -> None:
    precedence = Precedence(max_wait_s=60)
    precedence.opening()
    assert precedence.hold() is None


async def test_a_wait_ends_after_the_bound_even_if_the_opening_never_does() -> None:
    precedence = Precedence(max_wait_s=0.01, run_s=60)
    precedence.busy = True
    precedence.opening()
    held = precedence.hold()
    assert held is not None
    await asyncio.wait_for(held, 10)
    # then the streaming turns run a while before they wait again
    assert precedence.hold() is None


async def test_the_waits_end_once_the_loop_has_room_again() -> None:
    """The opening turns may be waiting for their model, not for the loop: a held stream
    must not leave the loop idle."""
    precedence = Precedence(max_wait_s=60)
    precedence.observe(0.010)
    assert precedence.busy
    precedence.opening()
    held = precedence.hold()
    assert held is not None
    precedence.observe(0.0005)
    assert not precedence.busy and held.done()


async def test_a_cancelled_wait_leaves_the_others_waiting() -> None:
    precedence = Precedence(max_wait_s=60)
    precedence.busy = True
    opening = precedence.opening()
    first, second = precedence.hold(), precedence.hold()
    assert first is not None and second is not None
    first.cancel()
    assert not second.done()
    opening.close()
    assert second.done() and not second.cancelled()


async def test_the_watch_says_busy_while_the_loop_lags_behind_its_timers() -> None:
    precedence = Precedence()
    watch = asyncio.create_task(precedence.watch(probe_s=0.005, busy_lag_s=0.02))
    try:
        asyncio.get_running_loop().call_soon(time.sleep, 0.1)  # a callback hogging the loop
        for _ in range(200):
            if precedence.busy:
                break
            await asyncio.sleep(0.005)
        assert precedence.busy
        for _ in range(200):
            if not precedence.busy:
                break
            await asyncio.sleep(0.005)
        assert not precedence.busy
    finally:
        watch.cancel()


@asynccontextmanager
async def runtime_on(database_url: str, demo: DemoLlm) -> AsyncIterator[Runtime]:
    async with runtime_of(Settings(database_url=database_url, upstream_base_url=demo.base_url,
                                   upstream_max_retries=0, title_calls=False)) as rt:
        rt.turn_deps.precedence = Precedence(max_wait_s=60)
        yield rt


@pytest.fixture
async def runtime(database_url: str, slow_demo_llm: DemoLlm) -> AsyncIterator[Runtime]:
    """On the demo model at 10 ms a delta: an answer still streams while the test acts."""
    async with runtime_on(database_url, slow_demo_llm) as rt:
        yield rt


@pytest.fixture
async def quick_runtime(database_url: str, demo_llm: DemoLlm) -> AsyncIterator[Runtime]:
    """On the demo model at full speed, for a test that only reads an answer to its end."""
    async with runtime_on(database_url, demo_llm) as rt:
        yield rt


async def test_an_answer_pauses_for_an_opening_turn_and_loses_nothing(runtime: Runtime) -> None:
    precedence = runtime.turn_deps.precedence
    assert precedence is not None
    precedence.busy = True
    async with runtime.db.transaction() as session:
        thread = await thread_store.create_thread(session, "svc")
    turn = await open_turn(runtime.turn_deps, "svc", thread.id, "tell me about precedence")
    assert precedence.openings == 1  # the turn itself, until its first delta
    texts: list[str] = []
    ended: list[Ended] = []

    async def consume() -> None:
        async for event in turn.events():
            if isinstance(event, Delta):
                texts.append(event.text)
            elif isinstance(event, Ended):
                ended.append(event)

    streaming = asyncio.create_task(consume())
    await until(lambda: bool(texts) or streaming.done(), what="the answer's first delta")
    assert texts and precedence.openings == 0

    other = precedence.opening()  # another turn opens
    for _ in range(500):
        if precedence.held:
            break
        await asyncio.sleep(0.01)
    assert precedence.held == 1
    paused_at = len(texts)
    for _ in range(5):  # the demo model goes on sending; the answer stays where it was
        await asyncio.sleep(0.05)
    assert len(texts) == paused_at

    other.close()
    await asyncio.wait_for(streaming, 30)
    assert [e.status for e in ended] == ["complete"]
    async with runtime.db.transaction() as session:
        rows = await threads_store.visible_history(session, "svc", thread.id)
    assert rows[-1].status == "complete" and rows[-1].content == "".join(texts)
    assert len(texts) > paused_at


async def test_an_openai_style_call_stops_opening_at_its_first_delta(
    quick_runtime: Runtime,
) -> None:
    runtime = quick_runtime
    precedence = runtime.turn_deps.precedence
    assert precedence is not None
    model = runtime.settings.offered_models[0]
    call = await open_completion(runtime.gate, Principal("svc", False), CompletionRequest(
        model, [{"role": "user", "content": "hello there"}]), None)
    assert precedence.openings == 1
    openings_after_deltas = []
    async with aclosing(call.deltas()) as deltas:
        async for _ in deltas:
            openings_after_deltas.append(precedence.openings)
    assert openings_after_deltas and set(openings_after_deltas[1:]) == {0}
    assert precedence.openings == 0
