"""Open SSE streams end soon after their API key is revoked.

A key is checked once, when a request authenticates; a stream opened before the revocation
would otherwise keep receiving (a thread's events for hours). One watcher per process asks
the database every `interval_s`, in one query, which of the keys holding open streams are
revoked, and calls those streams' callbacks: the response then ends them (a turn so ended is
stored `interrupted`, as when its client leaves). No query runs while no stream is open, and
an open stream costs an entry in a set, not a task waiting on an event.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from app.keys import repository as api_keys
from app.kit.keyed_sets import KeyedSets
from app.kit.periodic import every
from app.observe.logging import get_logger
from app.observe.metrics import GatewayMetrics
from app.store.db import Database

log = get_logger("services.revocation")


class RevocationWatcher:
    """Streams register their key while open; `run_forever` ends those of revoked keys."""

    def __init__(self, db: Database, interval_s: float,
                 metrics: GatewayMetrics | None = None) -> None:
        self.db, self.interval_s, self.metrics = db, interval_s, metrics
        self._open: KeyedSets[uuid.UUID, Callable[[], None]] = KeyedSets()

    @contextmanager
    def stream(self, key_id: uuid.UUID | None, on_revoked: Callable[[], None]
               ) -> Iterator[None]:
        """While open, `on_revoked` is called (once, on the event loop, from the check) when
        `key_id` is seen revoked; it must not block. `None` (auth mode off): never."""
        if key_id is None:
            yield
            return
        with self._open.member(key_id, on_revoked):
            yield

    async def check_once(self) -> int:
        """End the streams of revoked keys; returns how many were ended."""
        if not self._open:
            return 0
        async with self.db.transaction() as session:
            revoked = await api_keys.revoked_among(session, self._open.keys())
        ended = 0
        for key_id in revoked:
            streams = self._open.take(key_id)
            for on_revoked in streams:
                on_revoked()
            ended += len(streams)
            log.info("revoked_key_streams_ended", key_id=str(key_id), streams=len(streams))
        if ended and self.metrics is not None:
            self.metrics.streams_revoked.inc(ended)
        return ended

    async def run_forever(self) -> None:
        await every(self.interval_s, self.check_once, task="revocation_check",
                    metrics=self.metrics, log_fields=lambda: {"keys": len(self._open)})
