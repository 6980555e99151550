"""The process's long-lived parts, built and closed by the application lifespan."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx
import openai

from app.config.settings import Settings
from app.events.bus import MessageBus
from app.keys.revocation import RevocationWatcher
from app.kit.shutdown import Shutdown
from app.observe.logging import get_logger
from app.observe.metrics import GatewayMetrics
from app.process.service import ProcessRegistry
from app.store.db import Database
from app.turn.admission.gate import TurnGate
from app.turn.deps import TurnDeps
from app.turn.holds.checkpoints import Checkpointer
from app.turn.native.resume import TurnResumes
from app.turn.native.runs import TurnRuns
from app.upstream import UpstreamClient

log = get_logger("services.runtime")


class BackgroundTasks:
    """Named long-running tasks owned by the lifespan (e.g. the follow-up worker): started
    after start-up checks, cancelled and awaited on shutdown."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        if name in self._tasks:
            raise ValueError(f"background task {name!r} already running")

        async def guarded() -> None:
            try:
                await run()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("background_task_crashed", task=name)

        self._tasks[name] = asyncio.create_task(guarded(), name=name)

    @property
    def names(self) -> list[str]:
        return sorted(self._tasks)

    async def stop(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()


@dataclass
class Runtime:
    """Everything a request handler may need, on `app.state.runtime`."""

    settings: Settings
    db: Database
    http: httpx.AsyncClient
    openai: openai.AsyncOpenAI
    upstream: UpstreamClient
    turn_deps: TurnDeps
    bus: MessageBus
    gate: TurnGate
    processes: ProcessRegistry
    checkpoints: Checkpointer
    revocations: RevocationWatcher
    #: The turns this process runs (their logs), and resuming or stopping them.
    runs: TurnRuns
    resumes: TurnResumes
    background: BackgroundTasks = field(default_factory=BackgroundTasks)
    #: The process was told to stop: open streams end at once, each with a last event.
    shutdown: Shutdown = field(default_factory=Shutdown)
    metrics: GatewayMetrics = field(default_factory=GatewayMetrics)
