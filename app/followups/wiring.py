"""Plugs autonomy into a gateway process: the turn observers (scheduling, memory recall,
message announcements), the message bus and the worker. Called by the application lifespan."""

from __future__ import annotations

from dataclasses import dataclass

from app.events.bus import MessageBus, make_message_bus
from app.events.observer import MessageEvents
from app.followups.recall import MemoryRecall
from app.followups.scheduler import FollowupScheduler
from app.followups.thread_settings import default_autonomy
from app.followups.worker import FollowupWorker
from app.services.runtime import Runtime

WORKER_TASK = "followup_worker"


@dataclass
class AutonomyRuntime:
    """What start_autonomy set up, for the routes (`app.state.autonomy`) and for stopping."""

    bus: MessageBus
    worker: FollowupWorker


async def start_autonomy(rt: Runtime) -> AutonomyRuntime:
    """Register the observers, open the bus, start the worker (every process runs one)."""
    bus = make_message_bus(rt.db)
    rt.turns.observers.extend([
        MemoryRecall(rt.db),
        FollowupScheduler(default_autonomy(rt.settings)),
        MessageEvents(bus),
    ])
    await bus.start()
    worker = FollowupWorker(rt.turns)
    rt.background.start(WORKER_TASK, worker.run)
    return AutonomyRuntime(bus=bus, worker=worker)


async def stop_autonomy(autonomy: AutonomyRuntime) -> None:
    """After the background tasks stopped: close the bus."""
    await autonomy.bus.stop()
