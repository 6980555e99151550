"""Resuming and stopping a turn by its assistant message, wherever it runs.

A resume reads, in this order of preference: the turn's log in this process (TurnRuns), its
log in Redis (another process runs or ran it), or, when no log is left, the stored message
as one `CatchUp`. It answers from position `last_event_id + 1` (the `id:` of a delta or a
reasoning piece is its log position: one count for both channels), so a client that kept
what it received gets every event of both once.

Refusals (`ResumeRefused`, rendered as JSON errors):
  404 not_found               no such assistant message in this thread for this user
  409 last_event_id_ahead     the id is past the last event of the turn's log (of a turn
                              this process runs, or one that is over: another process's copy
                              to Redis may lag what its client read, and is waited for)
  410 resume_expired          the turn still runs but the events after the id were dropped
                              (the log keeps `resume_log_max_events`)
  409 answer_elsewhere        still streaming on a process this one cannot reach (no Redis)
  503 resume_unavailable      Redis did not answer a stop request
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Protocol

from app.answer.event_codec import is_last
from app.answer.events import TurnEvent
from app.answer.interruptions import STOP_REQUEST
from app.kit.redis_channel import REDIS_ERRORS
from app.observe.logging import get_logger
from app.observe.metrics import GatewayMetrics
from app.store.db import Database
from app.store.models import Message
from app.threads import repository as thread_store
from app.threads.service import message_json
from app.turn.native.runs import RunReader, TurnRun, TurnRuns
from app.turn.native.share import SharedTurns

log = get_logger("services.resume")


@dataclass(frozen=True, slots=True)
class CatchUp:
    """The stored message, when the events themselves are no longer kept: the client
    replaces what it had with this text."""

    message: dict[str, Any]


ResumeEvent = TurnEvent | CatchUp


class ResumeRefused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def message_not_found() -> ResumeRefused:
    return ResumeRefused(404, "not_found", "message not found")


def answer_elsewhere() -> ResumeRefused:
    return ResumeRefused(
        409, "answer_elsewhere",
        "this answer is being written by another gateway process that cannot be reached "
        "from here; reload the thread in a moment")


class ResumeStream(Protocol):
    """What an SSE response reads; close() once it is over (`stop`: end the turn too)."""

    def events(self) -> AsyncIterator[ResumeEvent]: ...

    def stop_here(self, reason: str) -> bool:
        """End the turn at once when it runs in this process; True when its events then end
        soon, each of them what the turn stores (False: the turn is elsewhere, or over)."""
        ...

    async def close(self, *, stop: str | None = None) -> None: ...


@dataclass(frozen=True, slots=True)
class StopOutcome:
    """`pending`: the stop was sent to another process (202); else the turn is over and
    `status` is its final status (200)."""

    pending: bool
    status: str


class TurnResumes:
    """The resume and stop use cases (one service for the two handlers)."""

    def __init__(self, db: Database, runs: TurnRuns,
                 metrics: GatewayMetrics | None = None) -> None:
        self.db, self.runs, self.shared, self.metrics = db, runs, runs.shared, metrics

    async def resume(self, user_id: str, thread_id: uuid.UUID, message_id: uuid.UUID,
                     last_event_id: int | None) -> ResumeStream:
        """The stream of the turn's events after `last_event_id` (None: from its start)."""
        try:
            message = await self._message(user_id, thread_id, message_id)
            stream, outcome = await self._stream(message, last_event_id)
        except ResumeRefused as refused:
            self._count(refused.code)
            log.info("resume_refused", code=refused.code, user_id=user_id,
                     message_id=str(message_id), last_event_id=last_event_id)
            raise
        self._count(outcome)
        log.info("turn_resumed", source=outcome, user_id=user_id, message_id=str(message_id),
                 last_event_id=last_event_id)
        return stream

    async def _stream(self, message: Message, last_event_id: int | None
                      ) -> tuple[ResumeStream, str]:
        start = 0 if last_event_id is None else last_event_id + 1
        finished = message.status != "streaming"
        run = self.runs.get(message.id)
        if run is not None:
            if _readable(start, run.log.first, run.log.end, finished=run.done):
                return RunReader(run, start), "local"
            return StoredStream(message), "stored"
        span = await self._shared_span(message.id)
        if span is not None and self.shared is not None:
            first, last = span
            # While the answer streams, the owner's copy to Redis may be behind what its own
            # client read (a batch still on its way, a reconnect after an outage): its end
            # is not known yet, and the follower waits for `start` to come.
            end = last + 1 if finished else max(last + 1, start)
            if _readable(start, first, end, finished=finished):
                return SharedStream(self, self.shared, message, start), "shared"
        if finished:
            return StoredStream(message), "stored"
        raise answer_elsewhere()

    async def _shared_span(self, message_id: uuid.UUID) -> tuple[int, int] | None:
        if self.shared is None:
            return None
        try:
            return await self.shared.span(message_id)
        except REDIS_ERRORS as exc:
            self.shared.outage.failed("span", exc, message_id=str(message_id))
            return None

    async def stop(self, user_id: str, thread_id: uuid.UUID,
                   message_id: uuid.UUID) -> StopOutcome:
        message = await self._message(user_id, thread_id, message_id)
        run = self.runs.get(message_id)
        if run is not None:
            return await self._stop_here(run)
        if message.status != "streaming":
            return StopOutcome(False, message.status)
        if self.shared is None:
            raise answer_elsewhere()
        try:
            await self.shared.request_stop(message_id)
        except REDIS_ERRORS as exc:
            self.shared.outage.failed("stop", exc, message_id=str(message_id))
            raise ResumeRefused(503, "resume_unavailable",
                                "the stop could not be passed on; try again") from exc
        log.info("turn_stop_requested", user_id=user_id, message_id=str(message_id))
        return StopOutcome(True, "streaming")

    async def _stop_here(self, run: TurnRun) -> StopOutcome:
        self.runs.stop(run.message_id, STOP_REQUEST)
        await run.settled()
        return StopOutcome(False, run.status)

    async def _message(self, user_id: str, thread_id: uuid.UUID,
                       message_id: uuid.UUID) -> Message:
        message = await self._stored(user_id, message_id)
        if message is None or message.thread_id != thread_id or message.role != "assistant":
            raise message_not_found()
        return message

    async def still_streaming(self, user_id: str, message_id: uuid.UUID) -> bool:
        message = await self._stored(user_id, message_id)
        return message is not None and message.status == "streaming"

    async def catch_up(self, user_id: str, message_id: uuid.UUID) -> CatchUp | None:
        message = await self._stored(user_id, message_id)
        return CatchUp(message_json(message)) if message is not None else None

    async def _stored(self, user_id: str, message_id: uuid.UUID) -> Message | None:
        async with self.db.transaction() as session:
            return await thread_store.get_message(session, user_id, message_id)

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.resumes.labels(outcome).inc()


def _readable(start: int, first: int, end: int, *, finished: bool) -> bool:
    """Whether the log serves a resume from `start`; False: the stored message does (the
    turn is over and its events from `start` are no longer all kept)."""
    if start > end:
        raise ResumeRefused(409, "last_event_id_ahead",
                            "last_event_id is past the last event of this answer")
    if start >= first:
        return True
    if finished:
        return False
    raise ResumeRefused(410, "resume_expired",
                        "the events after last_event_id are no longer kept; reload the thread")


class StoredStream:
    """The stored message, as one CatchUp."""

    def __init__(self, message: Message) -> None:
        self._message = message

    async def events(self) -> AsyncIterator[ResumeEvent]:
        yield CatchUp(message_json(self._message))

    def stop_here(self, reason: str) -> bool:
        return False

    async def close(self, *, stop: str | None = None) -> None:
        return None


class SharedStream:
    """A turn's log in Redis, followed live; when it ends without its closing event (its
    owner died), the stored message closes the stream instead."""

    def __init__(self, resumes: TurnResumes, shared: SharedTurns, message: Message,
                 start: int) -> None:
        self._resumes, self._shared, self._start = resumes, shared, start
        self._message_id, self._user_id = message.id, message.user_id

    async def events(self) -> AsyncIterator[ResumeEvent]:
        last: TurnEvent | None = None
        async for event in self._shared.follow(
                self._message_id, self._start,
                lambda: self._resumes.still_streaming(self._user_id, self._message_id)):
            last = event
            yield event
        if last is None or not is_last(last):
            catch_up = await self._resumes.catch_up(self._user_id, self._message_id)
            if catch_up is not None:
                yield catch_up

    def stop_here(self, reason: str) -> bool:
        """The turn runs in another process: close(stop=...) asks it to stop."""
        return False

    async def close(self, *, stop: str | None = None) -> None:
        if stop is not None:
            with suppress(*REDIS_ERRORS):
                await self._shared.request_stop(self._message_id, stop)
