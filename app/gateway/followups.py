"""Starts autonomy in a gateway process: the message bus and the follow-up worker. Called by
the application lifespan; the turn observers are built with every other one (app.gateway.main)."""

from __future__ import annotations

from dataclasses import dataclass

from app.events.bus import MessageBus
from app.followups.worker import FollowupWorker
from app.gateway.runtime import Runtime

WORKER_TASK = "followup_worker"


@dataclass
class AutonomyRuntime:
    """What start_autonomy set up, for the routes (`app.state.autonomy`) and for stopping."""

    bus: MessageBus
    worker: FollowupWorker


async def start_autonomy(rt: Runtime) -> AutonomyRuntime:
    """Open the bus, start the worker (every process runs one)."""
    await rt.bus.start()
    worker = FollowupWorker(rt.turn_deps)
    rt.background.start(WORKER_TASK, worker.run)
    return AutonomyRuntime(bus=rt.bus, worker=worker)


async def stop_autonomy(autonomy: AutonomyRuntime) -> None:
    """After the background tasks stopped: close the bus."""
    await autonomy.bus.stop()
