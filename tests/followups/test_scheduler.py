"""The scheduler decides on the thread's autonomy as it is when the reply ends, read under the
thread's lock by the finish itself: a user who turns follow-ups on or off while an answer
streams gets what they asked for."""

from __future__ import annotations

from contextlib import aclosing

import pytest

from app.answer.events import Delta
from app.followups import repository as followup_store
from app.gateway.runtime import Runtime
from app.threads import repository as thread_store
from app.turn.native.turn import open_turn


async def _set_autonomy(runtime: Runtime, thread_id: object, enabled: bool) -> None:
    async with runtime.db.transaction() as s:
        assert await thread_store.set_autonomy(
            s, "sched", thread_id, {"enabled": enabled})  # type: ignore[arg-type]


@pytest.mark.parametrize(("on_at_open", "on_at_end"), [(False, True), (True, False)])
async def test_the_autonomy_set_while_the_reply_streams_decides_the_followup(
    runtime: Runtime, on_at_open: bool, on_at_end: bool
) -> None:
    async with runtime.db.transaction() as s:
        thread = await thread_store.create_thread(s, "sched", None)
    await _set_autonomy(runtime, thread.id, on_at_open)
    turn = await open_turn(runtime.turn_deps, "sched", thread.id, "a question")
    changed = False
    async with aclosing(turn.events()) as events:
        async for event in events:
            if isinstance(event, Delta) and not changed:
                await _set_autonomy(runtime, thread.id, on_at_end)
                changed = True
    assert changed and turn.status == "complete"
    async with runtime.db.transaction() as s:
        followups = await followup_store.list_followups(s, thread.id)
    assert [f.status for f in followups] == (["pending"] if on_at_end else [])
