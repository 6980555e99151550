"""What a running turn holds of its process, taken when it opens and given back once when
it finishes: an upstream slot (a bound on the connections to the model server, so a flood
is refused as `gateway_busy` instead of queueing in the HTTP pool); until its main call's
response headers, a place among the turns opening at once (app.turn.holds.opening_places); a
place among the streams the checkpointer writes (so a crash loses at most one checkpoint
interval); until its first delta is out, a place among the opening turns that go first when
the process is saturated (app.turn.holds.precedence)."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Protocol

from app.observe.logging import get_logger
from app.turn.holds.checkpoints import Checkpointer, ContentReader, UsageReader
from app.turn.holds.opening_places import OpeningPlaces
from app.turn.holds.precedence import Opening, Precedence
from app.turn.holds.slots import Slot, UpstreamSlots

log = get_logger("services.turn_lease")


class Closable(Protocol):
    async def close(self) -> None: ...


@dataclass
class TurnLease:
    slot: Slot | None
    checkpoints: Checkpointer | None
    message_id: uuid.UUID | None = None
    precedence: Precedence | None = None
    opening: Opening | None = None
    opening_place: Slot | None = None

    @classmethod
    async def take(cls, slots: UpstreamSlots | None, checkpoints: Checkpointer | None,
                   precedence: Precedence | None = None,
                   openings: OpeningPlaces | None = None) -> TurnLease:
        """Raises GatewayBusy when no slot or no opening place frees up in time. The turn is
        opening from here (the waits are not counted: they wait for other turns)."""
        lease = cls(await slots.acquire() if slots is not None else None, checkpoints)
        if openings is not None:
            try:
                lease.opening_place = await openings.acquire()
            except BaseException:
                lease.give_back()
                raise
        if precedence is not None:
            lease.precedence, lease.opening = precedence, precedence.opening()
        return lease

    def upstream_answered(self) -> None:
        """The main call's response headers are in: the turn's own opening work is done, and
        the next turn in line may open (app.turn.holds.opening_places)."""
        if self.opening_place is not None:
            self.opening_place.release()
            self.opening_place = None

    def delta_sent(self) -> None:
        """The turn's first delta is out: from now on it waits for opening turns."""
        if self.opening is not None:
            self.opening.close()
            self.opening = None

    def hold(self) -> asyncio.Future[None] | None:
        """Before the next chunk of a turn past its first delta: a future to await first
        while the process is saturated and turns are opening (app.turn.holds.precedence)."""
        if self.opening is not None or self.precedence is None:
            return None
        return self.precedence.hold()

    def checkpoint(self, message_id: uuid.UUID, content: ContentReader,
                   usage: UsageReader | None = None, reasoning: ContentReader | None = None
                   ) -> None:
        """From now on, the checkpointer writes this stream's text (and its calls and its
        reasoning so far) on its schedule."""
        self.message_id = message_id
        if self.checkpoints is not None:
            self.checkpoints.track(message_id, content, usage, reasoning)

    def checkpoint_call(self, call_id: uuid.UUID, usage: UsageReader) -> None:
        """From now on, the checkpointer writes the calls so far of this open call (a call
        without a message) on its schedule."""
        self.message_id = call_id
        if self.checkpoints is not None:
            self.checkpoints.track_call(call_id, usage)

    def give_back(self) -> None:
        """Idempotent: a turn may be finished from two places."""
        if self.checkpoints is not None and self.message_id is not None:
            self.checkpoints.untrack(self.message_id)
        if self.slot is not None:
            self.slot.release()
        self.upstream_answered()
        self.delta_sent()
        self.slot, self.message_id = None, None

    async def close_and_give_back(self, stream: Closable | None) -> None:
        """Close the turn's upstream stream (a failure is logged, not raised: the answer is
        stored either way), then give the lease back: the connection is back in the pool,
        so the next turn may have it."""
        try:
            if stream is not None:
                await stream.close()
        except Exception as exc:
            log.warning("upstream_close_failed", error=type(exc).__name__)
        finally:
            self.give_back()
