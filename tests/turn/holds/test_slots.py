"""UpstreamSlots: a free slot is taken at once, a waiter gets one freed meanwhile, none free
is GatewayBusy with a Retry-After, and a slot given back twice counts once."""

from __future__ import annotations

import asyncio

import pytest

from app.turn.holds.slots import GatewayBusy, UpstreamSlots


async def test_no_free_slot_and_no_wait_is_gateway_busy() -> None:
    slots = UpstreamSlots(1, timeout_s=0)
    held = await slots.acquire()
    with pytest.raises(GatewayBusy) as refused:
        await slots.acquire()
    assert (refused.value.status, refused.value.code) == (503, "gateway_busy")
    assert refused.value.retry_after_s == 1
    held.release()
    held.release()  # idempotent: a second release must not make two slots of one
    assert slots.free == 1
    await slots.acquire()
    assert slots.free == 0


async def test_a_waiter_gets_the_slot_freed_while_it_waits() -> None:
    slots = UpstreamSlots(1, timeout_s=60)  # never reached: the slot is freed first
    held = await slots.acquire()
    waiter = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    assert not waiter.done()
    held.release()
    slot = await waiter
    assert slots.free == 0
    slot.release()
    assert slots.free == 1


async def test_a_wait_that_runs_out_is_gateway_busy_and_leaves_the_slots_whole() -> None:
    """The deadline itself is asyncio.timeout's; here it runs out at once (timeout 0 would
    not wait at all), and the semaphore keeps its count."""
    slots = UpstreamSlots(1, timeout_s=1e-9)
    held = await slots.acquire()
    with pytest.raises(GatewayBusy):
        await slots.acquire()
    held.release()
    assert slots.free == 1
