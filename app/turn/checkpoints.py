"""The partial text of running streams, written to their rows on a schedule of its own.

A SIGKILL runs no finish: the row would keep its empty content although the client had seen
the deltas. So one task per process writes, every `interval_s`, the content of each stream
that grew since its last checkpoint, all in ONE transaction (one executemany), never a
finished row (`WHERE status = 'streaming'`). Nothing runs per chunk and no connection is held
while a stream runs: a crash loses at most one interval of text.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from app.clock import Clock, utcnow
from app.kit.periodic import every
from app.logging import get_logger
from app.metrics import GatewayMetrics
from app.store.db import Database
from app.turn.rows import messages as message_store

log = get_logger("services.checkpoints")

#: Reads a stream's clean text so far (the turn's `answer.content`).
ContentReader = Callable[[], str]


class Checkpointer:
    """Streams register while they run; `run_forever` writes what changed."""

    def __init__(self, db: Database, interval_s: float, metrics: GatewayMetrics | None = None,
                 clock: Clock = utcnow) -> None:
        self.db, self.interval_s, self.metrics, self.clock = db, interval_s, metrics, clock
        self._streams: dict[uuid.UUID, ContentReader] = {}
        self._written: dict[uuid.UUID, int] = {}

    def track(self, message_id: uuid.UUID, content: ContentReader) -> None:
        self._streams[message_id] = content

    def untrack(self, message_id: uuid.UUID) -> None:
        """The stream ended: its finish writes the row from now on."""
        self._streams.pop(message_id, None)
        self._written.pop(message_id, None)

    @property
    def tracked(self) -> int:
        return len(self._streams)

    def _changed(self) -> dict[uuid.UUID, str]:
        """Content only grows (it is the deltas sent), so a longer text is a changed one."""
        changed: dict[uuid.UUID, str] = {}
        for message_id, read in list(self._streams.items()):
            text = read()
            if len(text) != self._written.get(message_id, 0):
                changed[message_id] = text
        return changed

    async def write_once(self) -> int:
        """One checkpoint of every changed stream; returns how many streams had changed."""
        changed = self._changed()
        if not changed:
            return 0
        async with self.db.transaction() as session:
            await message_store.checkpoint_contents(session, changed, now=self.clock())
        for message_id, text in changed.items():
            if message_id in self._streams:
                self._written[message_id] = len(text)
        if self.metrics is not None:
            self.metrics.checkpoint_writes.inc(len(changed))
        return len(changed)

    async def run_forever(self) -> None:
        await every(self.interval_s, self.write_once, task="checkpoint", metrics=self.metrics,
                    log_fields=lambda: {"streams": len(self._streams)})
