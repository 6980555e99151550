"""OpeningPlaces: the turns waiting in line are counted while they wait, a wait that runs
out leaves the count and the places whole, and a lease whose place is refused gives its
upstream slot back."""

from __future__ import annotations

import asyncio

import pytest

from app.observe.metrics import GatewayMetrics
from app.turn.holds.lease import TurnLease
from app.turn.holds.opening_places import OpeningPlaces
from app.turn.holds.slots import GatewayBusy, UpstreamSlots


def waiting(metrics: GatewayMetrics) -> float:
    value = metrics.registry.get_sample_value("chatgate_turns_waiting_to_open")
    assert value is not None
    return value


async def test_a_turn_in_line_is_counted_until_it_has_its_place() -> None:
    metrics = GatewayMetrics()
    places = OpeningPlaces(1, timeout_s=60, metrics=metrics)  # freed first: never reached
    held = await places.acquire()
    assert waiting(metrics) == 0  # a free place: no wait, nothing counted
    waiter = asyncio.create_task(places.acquire())
    await asyncio.sleep(0)
    assert waiting(metrics) == 1
    held.release()
    (await waiter).release()
    assert waiting(metrics) == 0
    assert places.free == 1


async def test_a_wait_that_runs_out_is_gateway_busy_and_counted_no_more() -> None:
    metrics = GatewayMetrics()
    places = OpeningPlaces(1, timeout_s=1e-9, metrics=metrics)  # runs out at once
    held = await places.acquire()
    with pytest.raises(GatewayBusy):
        await places.acquire()
    assert waiting(metrics) == 0
    held.release()
    assert places.free == 1


async def test_a_lease_refused_its_opening_place_gives_its_upstream_slot_back() -> None:
    slots, places = UpstreamSlots(2, timeout_s=0), OpeningPlaces(1, timeout_s=0)
    first = await TurnLease.take(slots, None, openings=places)
    with pytest.raises(GatewayBusy):
        await TurnLease.take(slots, None, openings=places)
    assert (slots.free, places.free) == (1, 0)
    first.upstream_answered()  # its headers are in: the place is free, the slot still held
    assert (slots.free, places.free) == (1, 1)
    second = await TurnLease.take(slots, None, openings=places)
    second.give_back()
    first.give_back()
    assert (slots.free, places.free) == (2, 1)
