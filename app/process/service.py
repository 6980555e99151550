"""This gateway process in the database: its id, its heartbeat, and the sweep of the streams
of processes that died.

Each process registers at start with an id of its own (the id goes on every assistant row it
streams), writes a heartbeat every `heartbeat_s`, and after each beat sweeps the `streaming`
rows of processes whose heartbeat is older than `dead_after_s` to `interrupted`
(`metadata.interrupted_reason = "process_died"`). A SIGKILLed process is so detected by any
live one, or by its own restart, within dead_after_s + heartbeat_s, and its threads accept a
new turn again. The age-based stale-streaming sweep (app.gateway.main) stays as the fallback
for rows without a process.

Fencing: a process cut off from the database looks dead to the others, so before they may
think so it ends its own answers. Each renewed heartbeat holds a lease of `fence_after_s`
from the moment the beat was sent (this process's monotonic clock); once the lease runs out
unrenewed, `on_fenced` ends every answer this process runs (`interrupted`,
`database_unreachable`: the clients are told at once, the rows stored when the database is
back) and new ones are refused until a beat succeeds again. `dead_after_s` leaves a margin
after it (app.config.fencing), and the row's `lease_until` says the same to every sweeper. A
takeover makes the rows `interrupted`, and a finish writes only a row still `streaming`, so
a late finish never overwrites a swept row.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import socket
import time
import uuid
from collections.abc import Callable

from app.answer.interruptions import PROCESS_DIED
from app.config.fencing import fence_margin
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
                 fence_after_s: float | None = None, metrics: GatewayMetrics | None = None,
                 clock: Clock = utcnow, monotonic: Callable[[], float] = time.monotonic
                 ) -> None:
        self.db, self.heartbeat_s, self.metrics, self.clock = db, heartbeat_s, metrics, clock
        self.dead_after = dt.timedelta(seconds=dead_after_s)
        self.process_id = new_process_id()
        self._host, self._pid = socket.gethostname(), os.getpid()
        #: None: no fence (SQLite: one process on a local file, no network to lose).
        self.fence_after_s = fence_after_s
        self._lease = (None if fence_after_s is None else
                       dt.timedelta(seconds=fence_after_s + fence_margin(dead_after_s)))
        self.monotonic = monotonic
        #: When the last renewed heartbeat was sent (monotonic): the lease runs from there.
        self.renewed_at = monotonic()
        #: The lease ran out unrenewed: this process's answers are ended, new ones refused.
        self.fenced = False
        #: Ends every answer this process runs (set by the composition: app.gateway.main).
        self.on_fenced: Callable[[], None] = lambda: None
        self.on_unfenced: Callable[[], None] = lambda: None

    async def register(self) -> None:
        sent, now = self.monotonic(), self.clock()
        async with self.db.transaction() as session:
            await process_store.register_process(
                session, self.process_id, hostname=self._host, pid=self._pid, now=now,
                lease_until=self._lease_until(now))
        self._renewed(sent)
        log.info("process_registered", process_id=self.process_id)

    def _lease_until(self, now: dt.datetime) -> dt.datetime | None:
        return None if self._lease is None else now + self._lease

    def _renewed(self, sent: float) -> None:
        """A heartbeat sent at `sent` is in the database: the lease runs from then."""
        self.renewed_at = max(self.renewed_at, sent)
        if self.fenced and not self.lease_over():
            self.fenced = False
            log.warning("process_fence_lifted", process_id=self.process_id)
            self.on_unfenced()

    def lease_over(self) -> bool:
        return (self.fence_after_s is not None
                and self.monotonic() >= self.renewed_at + self.fence_after_s)

    def check_lease(self) -> float:
        """Fence this process if its lease ran out unrenewed; returns how long until the
        lease would run out (the next check), or the heartbeat while fenced."""
        if self.fence_after_s is None:
            return float("inf")
        left = self.renewed_at + self.fence_after_s - self.monotonic()
        if left > 0:
            return left
        if not self.fenced:
            self.fenced = True
            log.error("process_fenced", process_id=self.process_id,
                      unrenewed_s=round(-left + self.fence_after_s, 3))
            if self.metrics is not None:
                self.metrics.background_failures.labels("fence").inc()
            self.on_fenced()
        return self.heartbeat_s

    async def watch_lease(self) -> None:
        """The fence's watchdog: independent of the heartbeat's round, which may itself be
        stuck waiting for a database that does not answer."""
        if self.fence_after_s is None:
            return
        while True:
            await asyncio.sleep(self.check_lease())

    async def unregister(self) -> None:
        """A clean stop: the rows this process still streams (none after the drain, unless
        a finish could not be stored) are swept by the others at once."""
        async with self.db.transaction() as session:
            await process_store.unregister_process(session, self.process_id)

    async def beat(self) -> None:
        sent, now = self.monotonic(), self.clock()
        async with self.db.transaction() as session:
            kept = await process_store.beat(session, self.process_id, hostname=self._host,
                                            pid=self._pid, now=now,
                                            lease_until=self._lease_until(now))
        if not kept and not self.fenced:
            # Taken over without this process having fenced itself (its lease was cut
            # short: a sweeper's clock ahead of ours): what still ran under the old row is
            # no longer ours. It ends now; the new row's answers run again.
            log.warning("process_taken_over", process_id=self.process_id)
            self.on_fenced()
            self.on_unfenced()
        self._renewed(sent)

    async def sweep(self) -> int:
        """The streams of dead processes become `interrupted`, and the calls their last
        checkpoints carried are billed in the same transaction (once: a swept row is no
        longer `streaming`); returns how many."""
        now = self.clock()
        async with self.db.transaction(quick=True) as session:
            swept = await sweep_dead_answers(
                session, process_store.live_processes(now, self.dead_after), now=now)
            await process_store.forget_dead_processes(session, now, self.dead_after)
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
