"""First deltas first: while this process's event loop is saturated, the turns that are
opening (from taking their lease to handing over their first delta) go before the turns
already streaming, whose next chunks wait a little for them.

On a saturated loop every step of every turn waits for a pass over all the others. A new
turn takes a dozen steps before its first delta (the request, its transaction, the upstream
request, the response, the first chunk, the first write); a streaming turn takes one per
chunk, and at a hundred chunks a turn the streams are most of every pass. What a user feels
is the wait for the first words: a streamed answer whose chunks come some milliseconds later
reads the same. So while turns are opening, a streaming turn waits before its next chunk,
together with every other one that waits (one timer for all of them), until no turn is
opening or MAX_WAIT_S has passed; then they all run RUN_S before they wait again.

Only while saturated, as the loop's lag says (how late a timer fires, probed every PROBE_S):
on a loop with room to spare nothing waits, and the waits end at the first probe that finds
room again, so a fast model's stream is not slowed for turns that are only waiting for their
own model."""

from __future__ import annotations

import asyncio

from app.observe.metrics import GatewayMetrics

#: The longest a streaming turn waits for the opening ones before its next chunk.
MAX_WAIT_S = 0.2
#: After a wait, streaming turns run this long before they wait again.
RUN_S = 0.02
#: A timer this late means the loop is saturated.
BUSY_LAG_S = 0.002
#: How often the loop's lag is probed.
PROBE_S = 0.05


class Precedence:
    """The opening turns of this process, and the streaming ones waiting for them."""

    def __init__(self, *, max_wait_s: float = MAX_WAIT_S, run_s: float = RUN_S,
                 metrics: GatewayMetrics | None = None) -> None:
        self.max_wait_s, self.run_s = max_wait_s, run_s
        self.metrics = metrics
        #: The loop is saturated (set by `watch`, from its lag).
        self.busy = False
        self._openings = 0
        self._held: list[asyncio.Future[None]] = []
        self._release: asyncio.TimerHandle | None = None
        self._free_until = 0.0

    @property
    def openings(self) -> int:
        """Turns opening now."""
        return self._openings

    @property
    def held(self) -> int:
        """Streaming turns waiting now."""
        return sum(not future.done() for future in self._held)

    def opening(self) -> Opening:
        """A turn starts opening; close the returned Opening once its first delta is out
        (or it ended without one)."""
        self._openings += 1
        return Opening(self)

    def hold(self) -> asyncio.Future[None] | None:
        """For a streaming turn, before its next chunk: a future to await first, or None.
        Its own future each (a cancelled turn cancels nobody else's wait)."""
        if not (self.busy and self._openings):
            return None
        loop = asyncio.get_running_loop()
        if loop.time() < self._free_until:
            return None
        held: asyncio.Future[None] = loop.create_future()
        self._held.append(held)
        if self._release is None:
            self._release = loop.call_later(self.max_wait_s, self._let_go)
        if self.metrics is not None:
            self.metrics.chunks_held.inc()
        return held

    def _closed(self) -> None:
        self._openings -= 1
        if self._openings == 0:
            self._let_go()

    def _let_go(self) -> None:
        if self._release is not None:
            self._release.cancel()
            self._release = None
            self._free_until = asyncio.get_running_loop().time() + self.run_s
        held, self._held = self._held, []
        for future in held:
            if not future.done():
                future.set_result(None)

    async def watch(self, probe_s: float = PROBE_S, busy_lag_s: float = BUSY_LAG_S) -> None:
        """Forever: how late a timer of `probe_s` fires (see `observe`)."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + probe_s
            await asyncio.sleep(probe_s)
            self.observe(max(0.0, loop.time() - due), busy_lag_s)

    def observe(self, lag_s: float, busy_lag_s: float = BUSY_LAG_S) -> None:
        """A probe's lag: past `busy_lag_s` the loop is saturated. Once it is not, the
        streaming turns that wait go on at once: the opening ones may be waiting for their
        model, not for the loop, and a held stream must not leave the loop idle."""
        self.busy = lag_s > busy_lag_s
        if not self.busy:
            self._let_go()
        if self.metrics is not None:
            self.metrics.loop_lag.set(lag_s)


class Opening:
    """One turn's place among the opening ones; close() is idempotent (a turn may end from
    two places)."""

    __slots__ = ("_precedence",)

    def __init__(self, precedence: Precedence) -> None:
        self._precedence: Precedence | None = precedence

    def close(self) -> None:
        precedence, self._precedence = self._precedence, None
        if precedence is not None:
            precedence._closed()
