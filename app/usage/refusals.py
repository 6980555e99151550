"""Refused turn requests, counted per UTC day and reason for the admin dashboard.

A refusal must stay cheap: it is what the gateway answers when it is overloaded (gateway_busy
when every database connection is taken) or flooded (rate_limited). So a refusal is one
in-memory increment here, and the counts reach the database (`refusal_counts`, added to by
app.usage.refusals_repository) in one short transaction every FLUSH_INTERVAL_S and once more at
shutdown. A flush that fails keeps its counts for the next one; the keys are (day, reason), a
handful a day, so what waits in memory stays small however many requests are refused. The
Prometheus counter `chatgate_refusals_total{reason}` is still counted, per process, at once.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter

from app.core.clock import Clock, utcnow
from app.kit.periodic import every
from app.observe.metrics import GatewayMetrics
from app.store.db import Database
from app.usage import refusals_repository as refusal_store
from app.usage.refusals_repository import RefusalKey

#: How long a refusal may wait in memory before it is visible to the dashboard.
FLUSH_INTERVAL_S = 5.0


class RefusalTally:
    """This process's refusals not yet written, and their writing."""

    def __init__(self, db: Database, *, metrics: GatewayMetrics | None = None,
                 clock: Clock = utcnow, interval_s: float = FLUSH_INTERVAL_S) -> None:
        self.db, self.metrics, self.clock, self.interval_s = db, metrics, clock, interval_s
        self._pending: Counter[RefusalKey] = Counter()

    def count(self, reason: str) -> None:
        """One refusal now (its UTC day), written at the next flush."""
        self._pending[(self.clock().astimezone(dt.UTC).date(), reason)] += 1

    @property
    def pending(self) -> int:
        return sum(self._pending.values())

    async def flush(self) -> None:
        """Write what was counted since the last flush; on failure it is kept for the next."""
        taken, self._pending = self._pending, Counter()
        if not taken:
            return
        try:
            async with self.db.transaction() as session:
                await refusal_store.add_refusals(session, taken)
        except BaseException:
            self._pending.update(taken)
            raise

    async def run_forever(self) -> None:
        await every(self.interval_s, self.flush, task="refusal_flush", metrics=self.metrics)
