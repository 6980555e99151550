"""Opening places: how many turns of this process may be opening at once.

A turn's opening is mostly the gateway's own work on its one event loop: the request, the
opening transaction, the upstream request and its response's headers. Without a bound, a
burst of turns arriving together interleaves all their openings: every step of each waits
for a pass over the steps of all the others, so no turn gets its first delta before nearly
all of them have opened, and a step timed against a deadline fails though its peer answered
at once (the upstream connect's: its socket connected, but the loop came back to it after
the timeout). With at most `size` turns opening, the others wait in line before anything is
stored or sent (FIFO, holding no connection), the ones opening get the loop's passes, and a
burst opens in the order it came. A turn that waited `timeout_s` without a place is refused
as `gateway_busy`, nothing stored.

A turn holds its place from taking its lease to its main call's response headers, or to its
end: the wait for the model's first token is the model's, not this process's, so the bound
does not cap how many answers may wait for a slow model at once."""

from __future__ import annotations

from app.observe.metrics import GatewayMetrics
from app.turn.holds.slots import Slot, UpstreamSlots


class OpeningPlaces(UpstreamSlots):
    """`size` places, waited for at most `timeout_s` (the slots' FIFO semaphore and
    refusal); the turns waiting in line are `chatgate_turns_waiting_to_open`."""

    def __init__(self, size: int, timeout_s: float, metrics: GatewayMetrics | None = None
                 ) -> None:
        super().__init__(size, timeout_s)
        self.metrics = metrics

    async def acquire(self) -> Slot:
        if self.metrics is None or not self._semaphore.locked():
            return await super().acquire()
        self.metrics.waiting_to_open.inc()
        try:
            return await super().acquire()
        finally:
            self.metrics.waiting_to_open.dec()
