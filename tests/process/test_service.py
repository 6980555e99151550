"""The fence of a process that cannot renew its heartbeat: its lease runs from the moment
the last renewed beat was sent, it fences itself once the lease is over (ending its
answers), and a renewed beat lifts the fence. The clock is the test's."""

from __future__ import annotations

from app.process.service import ProcessRegistry
from app.store.db import Database


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_an_unrenewed_lease_fences_the_process_and_a_beat_lifts_it(db: Database) -> None:
    clock = Clock()
    registry = ProcessRegistry(db, heartbeat_s=0.5, dead_after_s=10, fence_after_s=5,
                               monotonic=clock)
    events: list[str] = []
    registry.on_fenced = lambda: events.append("fenced")
    registry.on_unfenced = lambda: events.append("lifted")
    await registry.register()
    clock.now += 4.9
    assert registry.check_lease() > 0 and not registry.fenced
    clock.now += 0.1  # five seconds since the last renewed beat was sent
    assert registry.check_lease() == 0.5 and registry.fenced
    assert registry.check_lease() == 0.5 and events == ["fenced"]  # once
    await registry.beat()
    assert not registry.fenced and events == ["fenced", "lifted"]
    clock.now += 4.9
    assert registry.check_lease() > 0


async def test_a_beat_is_counted_from_when_it_was_sent(db: Database) -> None:
    """A beat that took long to answer renews the lease from when it left, as the
    heartbeat it wrote says to the others."""
    clock = Clock()
    registry = ProcessRegistry(db, heartbeat_s=0.5, dead_after_s=10, fence_after_s=5,
                               monotonic=clock)
    await registry.register()
    sent = clock.now + 3
    clock.now = sent

    def slow_clock() -> float:  # the beat reads the clock once as it leaves
        clock.now = sent + 4
        return sent

    registry.monotonic = slow_clock
    await registry.beat()
    registry.monotonic = clock
    assert registry.renewed_at == sent
    clock.now = sent + 5
    assert registry.check_lease() == 0.5 and registry.fenced


async def test_without_a_fence_bound_nothing_is_fenced(db: Database) -> None:
    clock = Clock()
    registry = ProcessRegistry(db, heartbeat_s=0.5, dead_after_s=10, monotonic=clock)
    clock.now += 1000
    assert registry.check_lease() == float("inf") and not registry.fenced
