"""The partial text of running streams, written to their rows on a schedule of its own.

A SIGKILL runs no finish: the row would keep its empty content although the client had seen
the deltas. So one task per process writes, every `interval_s`, the content of each stream
that grew since its last checkpoint, all in ONE transaction (one executemany), never a
finished row (`WHERE status = 'streaming'`). Nothing runs per chunk and no connection is held
while a stream runs: a crash loses at most one interval of text.

With the text go the turn's calls so far (its title call, the main call's usage as measured
or estimated from the streamed text), in the row's metadata: the dead-process sweep records
them as llm_calls rows and in the rollups, so a crash does not lose what the model was paid
for (up to one interval of it). A call without a message (an OpenAI-style call without a
thread) has no text to keep, but its calls so far go to its open call's row the same way.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from app.answer.records import CallRecord, checkpoint_entry
from app.core.clock import Clock, utcnow
from app.kit.periodic import every
from app.observe.logging import get_logger
from app.observe.metrics import GatewayMetrics
from app.store.db import Database
from app.turn.rows import messages as message_store
from app.turn.rows import open_calls

log = get_logger("services.checkpoints")

#: Reads a stream's clean text so far (the turn's `answer.content`).
ContentReader = Callable[[], str]
#: Reads a stream's calls so far (finished side calls, the main call as measured until now).
UsageReader = Callable[[], Sequence[CallRecord]]
#: What the last checkpoint wrote of a stream: its text's length, its calls' figures and its
#: reasoning's length.
_Written = tuple[int, tuple[tuple[str, int, int], ...], int]
_NOTHING_WRITTEN: _Written = (0, (), 0)


class _Readers(NamedTuple):
    """How a tracked stream's text, calls and reasoning so far are read, and whether it is
    an open call's (no message: its calls alone are written, to its open call's row)."""

    content: ContentReader
    usage: UsageReader | None
    reasoning: ContentReader | None
    open_call: bool = False


def _no_text() -> str:
    return ""


class _Changes(NamedTuple):
    """What a checkpoint writes: answers' texts, calls and reasonings by message; open
    calls' calls by call."""

    texts: dict[uuid.UUID, str]
    calls: dict[uuid.UUID, list[dict[str, Any]]]
    reasonings: dict[uuid.UUID, str]
    call_rows: dict[uuid.UUID, list[dict[str, Any]]]


class Checkpointer:
    """Streams register while they run; `run_forever` writes what changed."""

    def __init__(self, db: Database, interval_s: float, metrics: GatewayMetrics | None = None,
                 clock: Clock = utcnow) -> None:
        self.db, self.interval_s, self.metrics, self.clock = db, interval_s, metrics, clock
        self._streams: dict[uuid.UUID, _Readers] = {}
        self._written: dict[uuid.UUID, _Written] = {}

    def track(self, message_id: uuid.UUID, content: ContentReader,
              usage: UsageReader | None = None, reasoning: ContentReader | None = None
              ) -> None:
        """`reasoning` reads the answer's reasoning so far (`answer.reasoning`): what the
        user saw of the thinking is kept with the text should the process die."""
        self._streams[message_id] = _Readers(content, usage, reasoning)

    def track_call(self, call_id: uuid.UUID, usage: UsageReader) -> None:
        """An open call's calls so far, written to its row (app.turn.rows.open_calls)."""
        self._streams[call_id] = _Readers(_no_text, usage, None, open_call=True)

    def untrack(self, message_id: uuid.UUID) -> None:
        """The stream ended: its finish writes the row from now on."""
        self._streams.pop(message_id, None)
        self._written.pop(message_id, None)

    @property
    def tracked(self) -> int:
        return len(self._streams)

    def _changed(self) -> _Changes:
        """The streams whose text or reasoning grew (both only grow: they are the pieces
        sent) or whose calls' figures moved since their last checkpoint: their texts, their
        calls and their reasonings; the open calls' calls apart."""
        texts: dict[uuid.UUID, str] = {}
        calls: dict[uuid.UUID, list[dict[str, Any]]] = {}
        reasonings: dict[uuid.UUID, str] = {}
        call_rows: dict[uuid.UUID, list[dict[str, Any]]] = {}
        for message_id, readers in list(self._streams.items()):
            text = readers.content()
            made = list(readers.usage()) if readers.usage is not None else []
            thought = readers.reasoning() if readers.reasoning is not None else ""
            written: _Written = (len(text), tuple(
                (call.stage, call.prompt_tokens, call.completion_tokens) for call in made),
                len(thought))
            if written != self._written.get(message_id, _NOTHING_WRITTEN):
                self._written[message_id] = written
                if readers.open_call:
                    call_rows[message_id] = [checkpoint_entry(call) for call in made]
                    continue
                texts[message_id] = text
                if readers.usage is not None:
                    calls[message_id] = [checkpoint_entry(call) for call in made]
                if thought:
                    reasonings[message_id] = thought
        return _Changes(texts, calls, reasonings, call_rows)

    async def write_once(self) -> int:
        """One checkpoint of every changed stream; returns how many streams had changed.
        A failed round is written again in full by the next (nothing counts as written)."""
        changes = self._changed()
        written = [*changes.texts, *changes.call_rows]
        if not written:
            return 0
        try:
            async with self.db.transaction() as session:
                if changes.texts:
                    await message_store.checkpoint_contents(
                        session, changes.texts, now=self.clock(), calls=changes.calls,
                        reasonings=changes.reasonings)
                await open_calls.checkpoint_calls(session, changes.call_rows)
        except BaseException:
            for stream_id in written:
                self._written.pop(stream_id, None)
            raise
        for stream_id in written:
            if stream_id not in self._streams:
                self._written.pop(stream_id, None)
        if self.metrics is not None:
            self.metrics.checkpoint_writes.inc(len(written))
        return len(written)

    async def run_forever(self) -> None:
        await every(self.interval_s, self.write_once, task="checkpoint", metrics=self.metrics,
                    log_fields=lambda: {"streams": len(self._streams)})
