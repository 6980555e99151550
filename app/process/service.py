"""This gateway process in the database: its id, its heartbeat, and the sweep of the streams
of processes that died.

Each process registers at start with an id of its own (the id goes on every assistant row it
streams), writes a heartbeat every `heartbeat_s`, and after each beat sweeps the `streaming`
rows of processes whose heartbeat is older than `dead_after_s` to `interrupted`
(`metadata.interrupted_reason = "process_died"`). A SIGKILLed process is so detected by any
live one, or by its own restart, within dead_after_s + heartbeat_s, and its threads accept a
new turn again. The age-based stale-streaming sweep (app.gateway.main) stays as the fallback
for rows without a process.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import uuid

from app.answer.interruptions import PROCESS_DIED
from app.core.clock import Clock, utcnow
from app.kit.periodic import every
from app.observe.logging import get_logger
from app.observe.metrics import GatewayMetrics
from app.process import repository as process_store
from app.store.db import Database
from app.turn.rows import turn_rows
from app.turn.rows.sweeps import sweep_dead_answers

log = get_logger("services.processes")


def new_process_id() -> str:
    """Unique across restarts and hosts (a container's pid is often 1), readable in a row."""
    return f"{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


class ProcessRegistry:
    """Register, beat, sweep, unregister: owned by the application lifespan."""

    def __init__(self, db: Database, *, heartbeat_s: float, dead_after_s: float,
                 metrics: GatewayMetrics | None = None, clock: Clock = utcnow) -> None:
        self.db, self.heartbeat_s, self.metrics, self.clock = db, heartbeat_s, metrics, clock
        self.dead_after = dt.timedelta(seconds=dead_after_s)
        self.process_id = new_process_id()
        self._host, self._pid = socket.gethostname(), os.getpid()

    async def register(self) -> None:
        async with self.db.transaction() as session:
            await process_store.register_process(
                session, self.process_id, hostname=self._host, pid=self._pid, now=self.clock())
        log.info("process_registered", process_id=self.process_id)

    async def unregister(self) -> None:
        """A clean stop: the rows this process still streams (none after the drain, unless
        a finish could not be stored) are swept by the others at once."""
        async with self.db.transaction() as session:
            await process_store.unregister_process(session, self.process_id)

    async def beat(self) -> None:
        async with self.db.transaction() as session:
            await process_store.beat(session, self.process_id, hostname=self._host,
                                     pid=self._pid, now=self.clock())

    async def sweep(self) -> int:
        """The streams of dead processes become `interrupted`, and the calls their last
        checkpoints carried are billed in the same transaction (once: a swept row is no
        longer `streaming`); returns how many."""
        now = self.clock()
        cutoff = now - self.dead_after
        async with self.db.transaction(quick=True) as session:
            swept = await sweep_dead_answers(session, process_store.live_processes(cutoff),
                                             now=now)
            await process_store.forget_dead_processes(session, cutoff)
            billed = [answer for answer in swept if answer.calls]
            if billed:
                await turn_rows(self.db).bill_swept(session, billed)
        count = len(swept)
        if billed:
            log.warning("dead_process_usage_billed", answers=len(billed),
                        calls=sum(len(answer.calls) for answer in billed))
        if count:
            log.warning("dead_process_streams_interrupted", count=count,
                        process_id=self.process_id)
            if self.metrics is not None:
                self.metrics.streams_swept.labels(PROCESS_DIED).inc(count)
        return count

    async def run_forever(self) -> None:
        await every(self.heartbeat_s, self._beat_and_sweep, task="heartbeat",
                    metrics=self.metrics, log_fields=lambda: {"process_id": self.process_id})

    async def _beat_and_sweep(self) -> None:
        await self.beat()
        await self.sweep()
