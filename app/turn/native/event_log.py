"""A running turn's events, kept in order so that any number of readers (the first
connection, and every reconnection after a drop) follow the same stream from where each one
is. The turn's task appends; readers wait for more.

Positions are absolute: event `i` is the turn's i-th event (0 is `Started`, then the deltas
and reasoning pieces, whose one shared `seq` is their position, then the closing events).
The log is bounded: past `max_events`, the oldest events are dropped and a reader behind
them is told so (`LogTrimmed`). Per event, the cost is one list append and one wakeup."""

from __future__ import annotations

import asyncio

from app.answer.events import TurnEvent

#: Events kept per turn: far more than an answer of `upstream_max_tokens` deltas makes.
DEFAULT_MAX_EVENTS = 20_000


class LogTrimmed(Exception):
    """The events after the reader's position were dropped to keep the log bounded."""


class TurnLog:
    """One turn's events; appended by one task, read by many."""

    def __init__(self, max_events: int = DEFAULT_MAX_EVENTS) -> None:
        self.max_events = max_events
        self._events: list[TurnEvent] = []
        self._first = 0  # the absolute position of _events[0]
        #: Readers waiting for more: one future each, made only when a reader waits, so an
        #: append nobody waits for costs nothing more than the list append.
        self._waiters: list[asyncio.Future[None]] = []
        self.closed = False

    @property
    def first(self) -> int:
        """The oldest position still kept."""
        return self._first

    @property
    def end(self) -> int:
        """The position the next event will have (the count of events so far)."""
        return self._first + len(self._events)

    def append(self, event: TurnEvent) -> None:
        self._events.append(event)
        if len(self._events) > self.max_events:
            drop = len(self._events) - self.max_events
            del self._events[:drop]
            self._first += drop
        self._wake()

    def close(self) -> None:
        """No event follows: readers that have everything stop."""
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def read(self, start: int) -> list[TurnEvent]:
        """The events from `start` on that exist now (raises LogTrimmed)."""
        if start < self._first:
            raise LogTrimmed(start)
        return self._events[start - self._first:]

    def notify(self, waiter: asyncio.Future[None]) -> None:
        """Resolve `waiter` at the next append or close (a reader that polls, waiting on a
        future of its own that other things may resolve first)."""
        self._waiters.append(waiter)

    async def wait(self, position: int) -> None:
        """Return once an event at `position` exists or the log is closed."""
        while position >= self.end and not self.closed:
            waiter = asyncio.get_running_loop().create_future()
            self.notify(waiter)
            await waiter
