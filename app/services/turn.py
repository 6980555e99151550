"""One chat turn: open (one transaction), stream the upstream answer through the MarkerFilter,
finish (one transaction, shielded from cancellation).

    turn = await open_turn(deps, user_id, thread_id, content)   # ThreadNotFound, ThreadBusy
    async for event in turn.events(): ...                         # TurnEvent, SSE-ready

The SSE route and the follow-up worker both drive a turn through `events()`. No
database session is open while the stream runs. Whatever ends the stream (completion, an
upstream failure, the client leaving, cancellation), `finish()` stores the visible text that
was sent, an honest status, the metadata and the llm_calls, exactly once."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.context import ContextItem, build_msg_context, build_upstream_messages
from app.logging import get_logger
from app.sanitize import SanitizeReport, clean_json, clean_text
from app.services.observers import TurnObserver
from app.services.recorder import TurnRecorder
from app.services.shield import run_detached, run_shielded
from app.services.turn_usage import main_call_record
from app.settings import Settings
from app.store import messages as message_store
from app.store import threads as thread_store
from app.store.db import Database
from app.store.errors import MessageAlreadyFinished, MessageNotFound
from app.store.models import Message, Thread
from app.stream import MarkerFilter
from app.turns.records import FinishedMessage
from app.upstream import ProviderUsage, UpstreamClient, UpstreamError, UpstreamStream
from app.usage.pricing import PriceTable

log = get_logger("services.turn")

#: Messages read for the context; the character budget then keeps the newest that fit.
CONTEXT_HISTORY_LIMIT = 200

#: Attempts and first pause (doubling, capped) for the finishing transaction: about 5 s in
#: all, to ride out a database restart; past that the periodic stale sweep frees the row.
STORE_ATTEMPTS = 8
STORE_RETRY_PAUSE_S = 0.05
STORE_RETRY_PAUSE_MAX_S = 2.0
#: Past those, the finish is retried in the background, once every LATE_STORE_PAUSE_S for
#: LATE_STORE_WINDOW_S (a failover or a restart of the database), so the answer is not lost.
LATE_STORE_PAUSE_S = 5.0
LATE_STORE_WINDOW_S = 300.0

#: How the finishing transaction ended: "failed" is retried in the background; the two others
#: that are not "stored" are final (someone else settled the row, or the thread is gone).
StoreResult = Literal["stored", "already_finished", "thread_gone", "failed"]

TurnStatus = Literal["complete", "interrupted", "failed"]
#: A check inside open_turn's transaction, before anything is stored (see open_turn).
TurnGuard = Callable[[AsyncSession, Thread], Awaitable[None]]


class ThreadNotFound(Exception):
    """No such thread for this user (a foreign thread is the same as a missing one)."""


@dataclass
class TurnDeps:
    """What every turn needs; built once by the application lifespan."""

    db: Database
    upstream: UpstreamClient
    prices: PriceTable
    settings: Settings
    observers: list[TurnObserver] = field(default_factory=list)


@dataclass(frozen=True)
class TurnEvent:
    """One event for the client: SSE `event:` name, JSON data and (deltas) an `id:`."""

    event: str
    data: dict[str, Any]
    id: str | None = None


@dataclass(frozen=True)
class TurnFailure:
    """Why a turn failed: an upstream code, or `internal_error` for a gateway bug. (A turn
    that cannot be stored ends with a `storage_error` event instead; see _closing_events.)"""

    code: str
    message: str
    http_status: int | None = None


def _context_items(history: Sequence[Message]) -> list[ContextItem]:
    """Earlier messages as the model sees them (the store already left out streaming,
    failed and empty rows: `context_history`)."""
    return [ContextItem(role=m.role, content=m.content, time=m.created_at) for m in history]


async def open_turn(
    deps: TurnDeps,
    user_id: str,
    thread_id: uuid.UUID,
    content: str,
    *,
    synthetic: bool = False,
    trigger_type: str | None = None,
    trigger_reason: str | None = None,
    guard: TurnGuard | None = None,
) -> Turn:
    """Step 1: in ONE transaction read the history, store the user message and open the
    assistant message (`streaming`). Raises ThreadNotFound, or ThreadBusy (nothing stored).
    `guard` runs first in that transaction and may raise to store nothing (the follow-up
    worker checks there, atomically, that the user has not replied meanwhile)."""
    async with deps.db.transaction() as session:
        thread = await thread_store.get_thread(session, user_id, thread_id)
        if thread is None:
            raise ThreadNotFound(str(thread_id))
        if guard is not None:
            await guard(session, thread)
        history = await message_store.context_history(
            session, thread.id, limit=CONTEXT_HISTORY_LIMIT
        )
        user_message = await message_store.append_user_message(
            session, thread, content, synthetic=synthetic,
            trigger_type=trigger_type, trigger_reason=trigger_reason,
            max_chars=deps.settings.max_content_chars,
        )
        assistant = await message_store.open_assistant_message(session, thread)
    return Turn(deps, thread, user_message, assistant, _context_items(history))


class Turn:
    """The state of one turn between open and finish."""

    def __init__(
        self,
        deps: TurnDeps,
        thread: Thread,
        user_message: Message,
        assistant: Message,
        history: list[ContextItem],
    ) -> None:
        self.deps = deps
        self.thread = thread
        self.user_id = user_message.user_id
        self.user_message = user_message
        self.message_id = assistant.id
        self.history = history
        self.summary: str | None = thread.summary
        self.memories: list[ContextItem] = []
        self.recorder = TurnRecorder()
        self.filter = MarkerFilter()
        #: What cleaning the emitted text changed; noted in metadata.sanitized as the store would.
        self.sanitized = SanitizeReport()
        self.sent: list[str] = []
        self.raw_parts: list[str] = []
        self.chunks = 0
        self.provider_usage: ProviderUsage | None = None
        self.response_model: str | None = None
        self.upstream_messages: list[dict[str, str]] = []
        self.status: TurnStatus = "interrupted"
        self.failure: TurnFailure | None = None
        self._stream: UpstreamStream | None = None
        self.call_started = utcnow()
        self.first_token_at: datetime.datetime | None = None
        self._warnings_seen = 0
        self._filter_closed = False
        self.finish_reason: str | None = None
        self._finished: FinishedMessage | None = None
        self._store_result: StoreResult | None = None
        self._finishing = False

    @property
    def log_ids(self) -> dict[str, str]:
        return {"user_id": self.user_id, "thread_id": str(self.thread.id),
                "message_id": str(self.message_id)}

    @property
    def stored(self) -> bool:
        """The finished message was committed (False before finish() or when it failed)."""
        return self._store_result == "stored"

    @property
    def filter_closed(self) -> bool:
        """Whether the stream's end was fed to the filter (an interrupted turn stores only
        what was emitted; a stream trace's replay must do the same)."""
        return self._filter_closed

    # -- the pipeline -------------------------------------------------------------------

    async def events(self) -> AsyncGenerator[TurnEvent, None]:
        """Steps 2-6: the SSE events of the turn, in order. Cancelling or closing this
        iterator interrupts the turn; it is stored either way."""
        structlog.contextvars.bind_contextvars(**self.log_ids)
        try:
            yield TurnEvent("message_start", {
                "thread_id": str(self.thread.id),
                "user_message_id": str(self.user_message.id),
                "assistant_message_id": str(self.message_id),
            })
            for observer in self.deps.observers:
                await observer.before_main(self)
            self._build_request()
            async with aclosing(self._main_call()) as visible:
                async for text in visible:
                    yield self._delta(text)
            self.status = "complete"
        except UpstreamError as exc:
            self._fail(TurnFailure(exc.code, exc.message, exc.http_status))
            rest = self._close_filter()
            if rest:
                yield self._delta(rest)
        except Exception as exc:
            log.exception("turn_error", error=type(exc).__name__)
            self._fail(TurnFailure("internal_error", "the gateway failed; see the server log"))
        finally:
            await run_shielded(self.finish())
        for event in self._closing_events():
            yield event

    def _build_request(self) -> None:
        """Step 2: system prompt, then MSG_CONTEXT + newline + the user's text."""
        with self.recorder.stage("context"):
            marker = build_msg_context(
                self.history, budget_chars=self.deps.settings.context_budget_chars,
                summary=self.summary, memories=self.memories,
            )
            self.upstream_messages = build_upstream_messages(
                self.deps.settings.system_prompt, marker, self.user_message.content
            )

    async def _main_call(self) -> AsyncGenerator[str, None]:
        """Step 3: the streamed upstream call; yields visible text as soon as it is safe."""
        with self.recorder.stage("llm_calls"):
            self.call_started = utcnow()
            self._stream = await self.deps.upstream.open_stream(self.upstream_messages)
            async with aclosing(self._stream.chunks()) as chunks:
                async for chunk in chunks:
                    self.response_model = chunk.model or self.response_model
                    self.finish_reason = chunk.finish_reason or self.finish_reason
                    if chunk.usage is not None:
                        self.provider_usage = chunk.usage
                    if chunk.text:
                        safe = self._feed(chunk.text)
                        if safe:
                            yield safe
            rest = self._close_filter()
            if rest:
                yield rest

    def _feed(self, raw: str) -> str:
        """One upstream chunk through the filter; returns the clean text safe to send."""
        index = self.chunks
        self.chunks += 1
        if self.first_token_at is None:
            self.first_token_at = utcnow()
            self.recorder.mark_first_token()
        self.raw_parts.append(raw)
        safe = self.filter.feed(self._clean(raw))
        for observer in self.deps.observers:
            observer.on_chunk(self, index, raw, safe)
        self._report_new_warnings()
        return safe

    def _close_filter(self) -> str:
        """Resolve what the filter still holds (once; later calls return "")."""
        if self._stream is None or self._filter_closed:
            return ""
        self._filter_closed = True
        rest = self.filter.close()
        self._report_new_warnings()
        return rest

    def _clean(self, raw: str) -> str:
        """The store's cleaning (NUL removed, lone surrogates -> U+FFFD), applied to each raw
        chunk before the filter: what the client sees stays what is stored, a lone surrogate
        cannot break the UTF-8 encoding of the SSE stream, and a NUL removed later could not
        join the pieces of a marker the filter let pass. Per character, so cleaning each
        chunk equals cleaning the whole output."""
        return clean_text(raw, self.sanitized)

    def _report_new_warnings(self) -> None:
        records = self.filter.records
        for record in records[self._warnings_seen:]:
            fields = record.log_fields()
            log.warning("filter_warning", **fields)
            for observer in self.deps.observers:
                observer.on_warning(self, fields)
        self._warnings_seen = len(records)

    def _delta(self, text: str) -> TurnEvent:
        self.sent.append(text)
        return TurnEvent("delta", {"text": text}, id=str(len(self.sent)))

    def _fail(self, failure: TurnFailure) -> None:
        self.status = "failed"
        self.failure = failure
        log.warning("turn_failed", code=failure.code, error=failure.message)

    # -- step 4: finish -----------------------------------------------------------------

    async def finish(self) -> None:
        """Close the upstream, store the message with its status and usage, exactly once."""
        if self._finishing:
            return
        self._finishing = True
        # Bound here too: the SSE response may finish a turn whose events() never ran (the
        # client left first), and then no id would be in this task's log context.
        with structlog.contextvars.bound_contextvars(**self.log_ids):
            await self._finish()

    async def _finish(self) -> None:
        if self._stream is not None:
            try:
                await self._stream.close()
            except Exception as exc:
                log.warning("upstream_close_failed", error=type(exc).__name__)
        finished = self._finished_message()
        self._finished = finished
        self._store_result = await self._store(finished)
        if self._store_result == "stored":
            await self._after_finish(finished)
        elif self._store_result == "failed":
            run_detached(self._store_late(finished))  # it logs the summary line, once
        else:
            self._log_summary(finished, stored=False)

    async def _after_finish(self, finished: FinishedMessage) -> None:
        for observer in self.deps.observers:
            try:
                await observer.after_finish(self, finished)
            except Exception as exc:
                log.exception("turn_observer_failed", observer=type(observer).__name__,
                              hook="after_finish", error=type(exc).__name__)
        self._log_summary(finished, stored=True)

    async def _store(self, finished: FinishedMessage, attempts: int = STORE_ATTEMPTS
                     ) -> StoreResult:
        """The one finishing transaction, retried on transient errors (deadlock, lost
        connection): a row must not stay `streaming` because of one bad moment."""
        for attempt in range(1, attempts + 1):
            try:
                async with self.deps.db.transaction() as session:
                    await message_store.finish_assistant_message(session, finished)
                    for observer in self.deps.observers:
                        await self._observe_in_savepoint(session, observer, finished)
                return "stored"
            except MessageAlreadyFinished as exc:
                log.warning("turn_store_skipped", reason=type(exc).__name__)
                return "already_finished"
            except MessageNotFound as exc:
                log.warning("turn_store_skipped", reason=type(exc).__name__)
                await self._bill_lost_message(finished)
                return "thread_gone"
            except Exception as exc:
                log.exception("turn_store_failed", error=type(exc).__name__, attempt=attempt)
                if attempt < attempts:
                    await asyncio.sleep(
                        min(STORE_RETRY_PAUSE_MAX_S, STORE_RETRY_PAUSE_S * 2 ** (attempt - 1))
                    )
        return "failed"

    async def _store_late(self, finished: FinishedMessage) -> None:
        """The finish, retried in the background after the inline attempts failed. The row
        stays `streaming` meanwhile; should the stale sweep mark it `interrupted` first, this
        still completes it (a swept row keeps completed_at NULL)."""
        with structlog.contextvars.bound_contextvars(**self.log_ids):
            loop = asyncio.get_running_loop()
            deadline = loop.time() + LATE_STORE_WINDOW_S
            while loop.time() < deadline:
                await asyncio.sleep(LATE_STORE_PAUSE_S)
                result = await self._store(finished, attempts=1)
                if result == "stored":
                    self._store_result = result
                    log.info("turn_store_recovered")
                    await self._after_finish(finished)
                    return
                if result != "failed":
                    self._store_result = result
                    self._log_summary(finished, stored=False)
                    return
            log.error("turn_store_abandoned", window_s=LATE_STORE_WINDOW_S)
            self._log_summary(finished, stored=False)

    async def _bill_lost_message(self, finished: FinishedMessage) -> None:
        """The thread was deleted while the turn ran: no message to store, but its calls were
        made and are billed (one attempt; a failure is logged like any lost usage)."""
        try:
            async with self.deps.db.transaction() as session:
                await message_store.record_calls_of_a_lost_message(
                    session, self.user_id, finished.llm_calls)
        except Exception as exc:
            log.exception("turn_usage_lost", error=type(exc).__name__,
                          calls=len(finished.llm_calls))

    async def _observe_in_savepoint(
        self, session: AsyncSession, observer: TurnObserver, finished: FinishedMessage
    ) -> None:
        """One observer's writes (trace, title, event, follow-up) in a savepoint of their own:
        a failing hook is logged and rolled back alone, and never costs the answer."""
        try:
            async with session.begin_nested():
                await observer.in_finish_transaction(session, self, finished)
        except Exception as exc:
            log.exception("turn_observer_failed", observer=type(observer).__name__,
                          hook="in_finish_transaction", error=type(exc).__name__)

    def _finished_message(self) -> FinishedMessage:
        if self.upstream_messages:
            self.recorder.add_call(main_call_record(self))
        metadata: dict[str, Any] = {
            **self.recorder.totals(),
            "model": self.response_model or self.deps.upstream.model,
            "processing_time_ms": self.recorder.elapsed_ms(),
            "ttft_ms": self.recorder.ttft_ms,
            "response_metadata": dict(self.filter.metadata or {}),
            "stream": {"chunks": self.chunks, "warnings": list(self.filter.warnings),
                       "finish_reason": self.finish_reason},
            "processingDetails": {
                "pipeline_stages": dict(self.recorder.stages),
                "llm_calls": [call.as_metadata() for call in self.recorder.calls],
            },
        }
        if self.failure is not None:
            metadata["error"] = {"code": self.failure.code, "message": self.failure.message}
        return FinishedMessage(
            message_id=self.message_id,
            content="".join(self.sent),
            metadata=self.sanitized.merge_into(metadata),
            status=self.status,
            llm_calls=list(self.recorder.calls),
        )

    def _log_summary(self, finished: FinishedMessage, *, stored: bool) -> None:
        """The one summary line of the turn, stored or not (`stored=false`: the row is left
        for the stale-streaming sweep, or gone with its thread). A finish retried in the
        background logs it when the retries end."""
        log.info(
            "turn_finished",
            status=finished.status,
            stored=stored,
            chunks=self.chunks,
            ttft_ms=self.recorder.ttft_ms,
            duration_ms=self.recorder.elapsed_ms(),
            tokens=finished.metadata["tokens"],
            usage_source=finished.metadata["usage_source"],
            warnings=list(self.filter.warnings),
            error=self.failure.code if self.failure else None,
        )

    def _not_stored_event(self) -> TurnEvent:
        """What the client is told when its answer is not (or not yet) in the database."""
        if self._store_result == "thread_gone":
            return TurnEvent("error", {"code": "thread_deleted",
                                       "message": "the thread was deleted while the answer "
                                                  "streamed; nothing was stored"})
        if self._store_result == "already_finished":
            return TurnEvent("error", {"code": "storage_error",
                                       "message": "the answer was already settled elsewhere "
                                                  "and was not stored again"})
        return TurnEvent("error", {"code": "storage_error",
                                   "message": "the answer could not be stored yet; the gateway "
                                              "keeps trying for a while"})

    def _closing_events(self) -> list[TurnEvent]:
        """After the row is committed: a client that reloads on message_end sees it."""
        finished = self._finished
        if finished is None or self._store_result != "stored":
            return [self._not_stored_event()]
        events: list[TurnEvent] = []
        if self.filter.metadata:
            # Cleaned as the store cleans response_metadata: the event equals the stored copy.
            clean = clean_json(dict(self.filter.metadata), SanitizeReport())
            events.append(TurnEvent("metadata", clean))
        meta = finished.metadata
        events.append(TurnEvent("usage", {
            "prompt_tokens": meta["prompt_tokens"],
            "completion_tokens": meta["completion_tokens"],
            "total_tokens": meta["tokens"],
            "cost_usd": meta["cost_usd"],
            "usage_source": meta["usage_source"],
        }))
        if self.failure is not None:
            events.append(TurnEvent("error", {"code": self.failure.code,
                                              "message": self.failure.message}))
        else:
            events.append(TurnEvent("message_end", {"message_id": str(self.message_id),
                                                    "status": finished.status}))
        return events

