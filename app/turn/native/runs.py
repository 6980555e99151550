"""The turns this process runs, each in a task of its own that writes the turn's events into
its TurnLog; an SSE response (the first connection and every resume alike) is a reader of
that log. A turn so outlives its client: when its last reader leaves, it keeps streaming for
`grace_s`, and only if nobody came back by then is it stopped (stored `interrupted`, the
upstream closed), exactly as a leaving client stopped it before. With `grace_s` 0 it is
stopped the moment its last reader leaves. A stop request, a revoked key or the shutdown
stop it at once; a turn the shutdown stopped says so in its `message_end` (reason
`shutting_down`), so that its client knows to ask again rather than take the cut answer
for the model's.

A finished turn's log is kept `keep_s` (when there is a grace), so that a client that
dropped near the end still gets the rest. With `shared` (Redis), the log is mirrored for the
other processes, whose readers keep the turn alive as local ones do."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing

from app.answer.events import Delta, Ended, Reasoning, TurnEvent
from app.answer.finish import not_stored
from app.answer.interruptions import CLIENT_GONE, DATABASE_UNREACHABLE, SHUTTING_DOWN
from app.answer.records import FinalStatus
from app.kit.shield import run_shielded
from app.observe.logging import get_logger
from app.observe.metrics import GatewayMetrics
from app.turn.native.event_log import TurnLog
from app.turn.native.share import PRESENCE_TTL_MS, SharedTurns
from app.turn.native.turn import Turn

log = get_logger("services.turn_runs")

#: How long the shutdown waits for stopped turns to be stored.
CLOSE_WAIT_S = 10.0

#: How many deltas a run with a reader may be ahead of what its readers have taken. Past it,
#: the run waits until a reader has taken everything, so a reader is woken once per batch of
#: deltas rather than once per delta (and the run once per batch, not per delta). A stopped
#: turn so stores what was sent give or take at most this many deltas (plus what is in the
#: socket's buffers).
PACE_AHEAD = 16


class TurnRun:
    """One turn, its task and its log."""

    def __init__(self, turn: Turn, turn_log: TurnLog, runs: TurnRuns) -> None:
        self.log, self.message_id, self.log_ids = turn_log, turn.message_id, turn.log_ids
        #: Dropped once the turn is over: a finished run keeps only its log (and status)
        #: for its keep time, not the prompt, the answer's parts or the raw chunks.
        self._turn: Turn | None = turn
        self.status: FinalStatus = turn.status
        self.readers = 0
        self.stop_reason: str | None = None
        self.grace: asyncio.TimerHandle | None = None
        self.mirror: asyncio.Task[None] | None = None
        self.grace_check: asyncio.Task[None] | None = None
        self._runs = runs
        #: While it has a reader, the turn goes at its reader's pace, as it did when the
        #: response iterated it: a slow client slows the upstream read, and what is stored
        #: when it is stopped is what was sent, give or take at most PACE_AHEAD deltas.
        #: Without a reader (the grace), it goes at the model's pace into its log.
        self._read_to = 0
        self._deltas_ahead = 0
        self._started = False
        self._caught_up: asyncio.Future[None] | None = None
        self.task = asyncio.create_task(self._pump(turn), name=f"turn-{turn.message_id}")
        turn.ends_with(self._ended_by_process)

    @property
    def done(self) -> bool:
        return self.task.done()

    async def _pump(self, turn: Turn) -> None:
        self._started = True
        try:
            if self.stop_reason is not None:  # stopped before this task first ran
                raise asyncio.CancelledError
            async with aclosing(turn.events()) as events:
                async for event in events:
                    if self.log.closed:  # fenced while it stored its end: told already
                        continue
                    self.log.append(event)
                    if self.readers and isinstance(event, Delta | Reasoning):
                        self._deltas_ahead += 1
                        if self._deltas_ahead > PACE_AHEAD:
                            await self._read_up_to(self.log.end)
        except asyncio.CancelledError:  # stopped: stored as it stands, then its closing events
            await run_shielded(turn.finish())
            if self.log.closed:  # fenced: its end was told then
                return

            for event in turn.closing_events:
                self.log.append(self._with_reason(event))
        finally:
            self.status, self._turn = turn.status, None
            self.log.close()
            self._runs.ended(self)

    def _with_reason(self, event: TurnEvent) -> TurnEvent:
        """The shutdown's stop is the one a client is told (`message_end` `reason`): the
        others are the client's own doing, or a Stop it asked for."""
        if self.stop_reason == SHUTTING_DOWN and isinstance(event, Ended):
            return dataclasses.replace(event, reason=SHUTTING_DOWN)
        return event

    def _ended_by_process(self, reason: str) -> None:
        """The process ends its answers (the fence: app.turn.holds.running): stopped as a
        Stop stops it, or, when it is already storing its end, its readers told so."""
        if not self._runs.stop(self.message_id, reason):
            self.not_stored_yet()

    def not_stored_yet(self) -> None:
        """Fenced while it stores its end (app.process), which waits for the database: its
        readers are told now that it is not stored yet (`storage_error`), not once its
        store gives up, before another process may take the row over."""
        if self.done or self.log.closed:
            return
        self.log.append(not_stored("failed"))
        self.log.close()
        log.info("turn_fenced_while_storing", **self.log_ids)

    async def _read_up_to(self, end: int) -> None:
        """Until a reader has sent everything before `end`, or no reader is left."""
        loop = asyncio.get_running_loop()
        while self._read_to < end and self.readers > 0:
            self._caught_up = loop.create_future()
            try:
                await self._caught_up
            finally:
                self._caught_up = None
        self._deltas_ahead = 0

    def read_to(self, position: int) -> None:
        """A reader has sent the events before `position`."""
        if position > self._read_to:
            self._read_to = position
            self._wake_run()

    def _wake_run(self) -> None:
        if self._caught_up is not None and not self._caught_up.done():
            self._caught_up.set_result(None)

    def stop(self, reason: str) -> bool:
        """End the turn now (once; not when it is already storing its end): the task is
        cancelled as a leaving client's response was, and `reason`
        (app.answer.interruptions) is what its row says. Returns whether this stopped it."""
        if self._turn is None or self._turn.finishing or self.stop_reason is not None:
            return False
        self.stop_reason = reason
        self._turn.stopping(reason)
        if reason == DATABASE_UNREACHABLE:
            # Fenced (app.process): its readers hear the end now, before another process
            # may take the row over, not once the finish has waited for the database.
            self.log.append(Ended(self.message_id, "interrupted", DATABASE_UNREACHABLE))
            self.log.close()
        if self._started:  # else the task has not run yet: it stops as it starts
            self.task.cancel()
        log.info("turn_stopped", reason=reason, **self.log_ids)
        return True

    async def settled(self) -> None:
        """Wait until the turn is over and stored (or its store has failed over to the
        background retries)."""
        await asyncio.wait([self.task])

    def attach(self) -> None:
        self.readers += 1
        if self.grace is not None:
            self.grace.cancel()
            self.grace = None

    def detach(self) -> None:
        self.readers -= 1
        self._wake_run()
        if self.readers == 0 and not self.done:
            self._runs.unread(self)


class RunReader:
    """One connection's reading of a run, from a log position on; attached from creation
    until close() so the run knows it has a reader even before the response starts."""

    def __init__(self, run: TurnRun, start: int) -> None:
        self.run, self.start = run, start
        self._open = True
        run.attach()

    async def events(self) -> AsyncIterator[TurnEvent]:
        """The log's events from `start`, live, until the turn's last (raises LogTrimmed
        when this reader fell behind what the log keeps): take() until ended."""
        while True:
            for event in self.take():
                yield event
            if self.ended:
                return
            await self.run.log.wait(self.start)

    def take(self) -> list[TurnEvent]:
        """The log's events from this reader's position that exist now, the position moved
        past them (raises LogTrimmed), for a reader that polls."""
        events = self.run.log.read(self.start)
        if events:
            self.start += len(events)
            self.run.read_to(self.start)
        return events

    @property
    def ended(self) -> bool:
        """Every event was taken and none follows."""
        return self.run.log.closed and self.start >= self.run.log.end

    def notify(self, waiter: asyncio.Future[None]) -> None:
        """Resolve `waiter` once take() may return more (or ended may turn True)."""
        self.run.log.notify(waiter)

    def stop_here(self, reason: str) -> bool:
        """End the turn now (it runs here): its task is cancelled before it reads another
        chunk, so the log's events up to its close are what it stores."""
        self.run.stop(reason)
        return True

    async def close(self, *, stop: str | None = None) -> None:
        """The connection is over. `stop`: end the turn too (a revoked key). A turn stopped
        by this (or by the last reader leaving without a grace) is stored before this
        returns, as a response always stored its turn before it completed."""
        if not self._open:
            return
        self._open = False
        if stop is not None:
            self.run.stop(stop)
        self.run.detach()
        # A fenced turn's store waits for the database to answer again: its response ends
        # without it (its end was told; the row is stored, or taken over, later).
        if self.run.stop_reason not in (None, DATABASE_UNREACHABLE):
            await self.run.settled()


class TurnRuns:
    """The registry of this process's running (and recently finished) turns."""

    def __init__(self, *, grace_s: float, keep_s: float, max_events: int,
                 shared: SharedTurns | None = None,
                 metrics: GatewayMetrics | None = None) -> None:
        self.grace_s, self.keep_s, self.max_events = grace_s, keep_s, max_events
        self.shared, self.metrics = shared, metrics
        self._runs: dict[uuid.UUID, TurnRun] = {}
        self.shutting_down = False

    def start(self, turn: Turn) -> RunReader:
        """Run `turn` in its own task; returns its first reader (the opening request's).
        During the shutdown it is stopped as it starts: stored, and its client told."""
        run = TurnRun(turn, TurnLog(self.max_events), self)
        self._runs[run.message_id] = run
        if self.shared is not None and self.grace_s > 0:
            run.mirror = asyncio.create_task(self.shared.mirror(run.message_id, run.log))
        if self.shutting_down:
            self.stop(run.message_id, SHUTTING_DOWN)
        return RunReader(run, 0)

    def get(self, message_id: uuid.UUID) -> TurnRun | None:
        return self._runs.get(message_id)

    def __len__(self) -> int:
        return len(self._runs)

    def stop(self, message_id: uuid.UUID, reason: str) -> bool:
        """Stop the turn if this process runs it; whether it did."""
        run = self._runs.get(message_id)
        stopped = run is not None and run.stop(reason)
        if stopped and self.metrics is not None:
            self.metrics.turns_stopped.labels(reason).inc()
        return stopped

    def unread(self, run: TurnRun) -> None:
        """The run's last reader left: stop it now, or once the grace is over."""
        if self.grace_s <= 0:
            self.stop(run.message_id, CLIENT_GONE)
            return
        run.grace = asyncio.get_running_loop().call_later(self.grace_s, self._grace_over, run)

    def _grace_over(self, run: TurnRun) -> None:
        run.grace = None
        if run.readers or run.done:
            return
        if self.shared is None:
            self.stop(run.message_id, CLIENT_GONE)
            return
        run.grace_check = asyncio.create_task(self._grace_over_shared(run, self.shared))

    async def _grace_over_shared(self, run: TurnRun, shared: SharedTurns) -> None:
        """A reader on another process keeps the turn alive; its presence is re-checked as
        often as it expires."""
        if await shared.read_elsewhere(run.message_id):
            if not run.readers and not run.done:
                run.grace = asyncio.get_running_loop().call_later(
                    PRESENCE_TTL_MS / 1000, self._grace_over, run)
            return
        if not run.readers:
            self.stop(run.message_id, CLIENT_GONE)

    def ended(self, run: TurnRun) -> None:
        """The run's task is over: its log stays readable for `keep_s` (with a grace)."""
        if self.grace_s > 0 and self.keep_s > 0:
            asyncio.get_running_loop().call_later(self.keep_s, self._forget, run)
        else:
            self._forget(run)

    def _forget(self, run: TurnRun) -> None:
        if self._runs.get(run.message_id) is run:
            del self._runs[run.message_id]

    async def listen_for_stops(self) -> None:
        """Stop requests made on other processes (only with `shared`)."""
        if self.shared is not None:
            await self.shared.listen_for_stops(self.stop)

    def shut_down(self) -> list[TurnRun]:
        """The process is stopping: every running turn (and any started from now on) is
        stopped, each reader getting its `message_end` once it is stored. Returns the runs
        it stopped."""
        self.shutting_down = True
        running = [run for run in self._runs.values() if not run.done]
        for run in running:
            self.stop(run.message_id, SHUTTING_DOWN)
        return running

    async def close(self) -> None:
        """Shutdown: stop every running turn and wait (bounded) for their finishes."""
        running = [run for run in self._runs.values() if not run.done]
        self.shut_down()
        tasks = [run.task for run in running]
        mirrors = [run.mirror for run in self._runs.values() if run.mirror is not None]
        if tasks or mirrors:
            await asyncio.wait(tasks + mirrors, timeout=CLOSE_WAIT_S)
        for mirror in mirrors:  # Redis still away: what was not mirrored by now never is
            mirror.cancel()
        await asyncio.gather(*mirrors, return_exceptions=True)
        if self.shared is not None:
            await self.shared.aclose()
