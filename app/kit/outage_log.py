"""A dependency's failures as one warning a minute instead of one per attempt.

A process whose Redis is down fails an attempt every second (the stop listener reconnects
each second, every running turn's mirror retries, every resume asks): a line per failure
buried the rest of the log. The first failure of an outage is logged at once; those after it
are counted, by what failed, and logged together at most once per `every_s`; the first
success after failures says the outage is over, with what it cost since the last line."""

from __future__ import annotations

from collections import Counter

from app.core.clock import Clock, utcnow
from app.observe.logging import get_logger

#: At most one warning line per outage per this many seconds.
EVERY_S = 60.0


class OutageLog:
    """Failures of one dependency: `failed` each time one fails, `succeeded` when one works."""

    def __init__(self, event: str, recovered_event: str, *, component: str,
                 every_s: float = EVERY_S, clock: Clock = utcnow) -> None:
        self._log = get_logger(component)
        self.event, self.recovered_event = event, recovered_event
        self.every_s, self._clock = every_s, clock
        self._last_line = clock()  # when the last warning was logged
        self._unlogged: Counter[str] = Counter()
        self._down = False
        #: Every failure since this object was made (what tests and /metrics-like probes read).
        self.failures = 0

    def failed(self, what: str, error: BaseException, **fields: object) -> None:
        """One attempt failed: logged now when it is the outage's first or the last line is
        `every_s` old, else counted for the next line."""
        self.failures += 1
        self._unlogged[what] += 1
        now = self._clock()
        since_s = (now - self._last_line).total_seconds()
        if self._down and since_s < self.every_s:
            return
        failures = sum(self._unlogged.values())
        self._log.warning(self.event, what=what, error=type(error).__name__,
                          failures=failures, by_what=dict(self._unlogged),
                          since_s=round(since_s) if self._down else 0, **fields)
        self._unlogged.clear()
        self._down, self._last_line = True, now

    def succeeded(self) -> None:
        """An attempt worked: the outage, if there was one, is over (and said so)."""
        if not self._down:
            return
        self._log.info(self.recovered_event, unlogged_failures=sum(self._unlogged.values()),
                       by_what=dict(self._unlogged))
        self._unlogged.clear()
        self._down = False
