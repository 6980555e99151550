"""The finishing transaction of a turn: the message, its calls and the rollup, and each
observer's writes in a savepoint of its own, in ONE transaction.

A row must not stay `streaming` because of one bad moment: the transaction is retried inline
(8 attempts from a 50 ms pause, doubling to 2 s: about 5 s, a database restart), then once
every 5 s in the background for 5 minutes (a failover); past that the row is left to the
dead-process sweep, which frees it once this process stops (a row of a live process is
never swept). A thread deleted while its answer streamed has no
row to finish, but its calls were made: they are billed without a message."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.finish import StoreResult, TurnOutcome
from app.answer.records import FinishedMessage
from app.kit.shield import run_detached
from app.observe.logging import get_logger
from app.store.db import Database
from app.store.errors import MessageAlreadyFinished, MessageNotFound
from app.turn.observers.seam import TurnHandler
from app.turn.rows import FinishedRow, TurnRows

log = get_logger("services.turn_store")

STORE_ATTEMPTS, STORE_RETRY_PAUSE_S, STORE_RETRY_PAUSE_MAX_S = 8, 0.05, 2.0
LATE_STORE_PAUSE_S, LATE_STORE_WINDOW_S = 5.0, 300.0


@dataclass(frozen=True)
class TurnStore:
    db: Database
    rows: TurnRows
    user_id: str
    handlers: Sequence[TurnHandler]

    async def store(self, finished: FinishedMessage, outcome: TurnOutcome,
                    attempts: int = STORE_ATTEMPTS) -> StoreResult:
        """The transaction, retried on transient errors (deadlock, lost connection)."""
        alone = not any(self._may_write(handler, finished, outcome) for handler in self.handlers)
        for attempt in range(1, attempts + 1):
            try:
                await self._finish(finished, outcome, alone=alone)
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
                        min(STORE_RETRY_PAUSE_MAX_S, STORE_RETRY_PAUSE_S * 2 ** (attempt - 1)))
        return "failed"

    async def _finish(self, finished: FinishedMessage, outcome: TurnOutcome, *,
                      alone: bool) -> None:
        """`alone` (no hook may write in it): the message's writes alone, then what a hook
        found to write after all; else one transaction with every hook's writes."""
        if alone:
            row = await self.rows.finish(finished)
            await self._write_after_finish(finished, outcome, row)
            return

        async def hooks(session: AsyncSession, row: FinishedRow) -> None:
            await self._write_in_finish(session, finished, outcome, row)

        await self.rows.finish(finished, hooks)

    @staticmethod
    def _may_write(handler: TurnHandler, finished: FinishedMessage, outcome: TurnOutcome
                   ) -> bool:
        """The hook's answer; one that fails is logged and taken for a yes: the finish is
        then a transaction, where its writes, if any, run in their savepoint."""
        try:
            return handler.may_write_in_finish(finished, outcome)
        except Exception as exc:
            log.exception("turn_observer_failed", hook="may_write_in_finish",
                          observer=type(handler).__name__, error=type(exc).__name__)
            return True

    async def _write_after_finish(self, finished: FinishedMessage, outcome: TurnOutcome,
                                  row: FinishedRow) -> None:
        """The writes of a hook that said it would have none and then found some in the
        stored row (a thread's follow-ups turned on while its answer streamed), in a
        transaction of their own once the message is committed. Nothing to write costs
        nothing; a failure is logged: the message is stored."""
        try:
            if not any(handler.writes_in_finish(finished, outcome, row)
                       for handler in self.handlers):
                return
            async with self.db.transaction() as session:
                await self._write_in_finish(session, finished, outcome, row)
        except Exception as exc:
            log.exception("turn_observer_failed", hook="in_finish_transaction",
                          error=type(exc).__name__)

    async def _write_in_finish(self, session: AsyncSession, finished: FinishedMessage,
                               outcome: TurnOutcome, row: FinishedRow) -> None:
        """Each hook's writes, in a savepoint of its own: one failing is logged and rolled
        back alone."""
        for handler in self.handlers:
            if not handler.writes_in_finish(finished, outcome, row):
                continue
            try:
                async with session.begin_nested():
                    await handler.in_finish_transaction(session, finished, outcome, row)
            except Exception as exc:  # a failing hook never costs the answer
                log.exception("turn_observer_failed", hook="in_finish_transaction",
                              observer=type(handler).__name__, error=type(exc).__name__)

    async def store_then(self, finished: FinishedMessage, outcome: TurnOutcome,
                         settled: Callable[[StoreResult], Awaitable[None]]) -> StoreResult:
        """`store`, then `settled` with the message's fate once it is known: at once, or,
        when the inline attempts failed, after the background retries (`store_late`, in a
        task started here: it keeps the caller's log context). Returns the inline result."""
        result = await self.store(finished, outcome)
        if result == "failed":
            run_detached(self._late_then(finished, outcome, settled))
        else:
            await settled(result)
        return result

    async def _late_then(self, finished: FinishedMessage, outcome: TurnOutcome,
                         settled: Callable[[StoreResult], Awaitable[None]]) -> None:
        await settled(await self.store_late(finished, outcome))

    async def store_late(self, finished: FinishedMessage, outcome: TurnOutcome) -> StoreResult:
        """The background retries. The row stays `streaming` meanwhile; should a sweep take it
        over first (`interrupted`), this stores nothing (`already_finished`): the finish
        writes only a row still `streaming` (the fence, app.process)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LATE_STORE_WINDOW_S
        result: StoreResult = "failed"
        while loop.time() < deadline and result == "failed":
            await asyncio.sleep(LATE_STORE_PAUSE_S)
            result = await self.store(finished, outcome, 1)
        if result == "stored":
            log.info("turn_store_recovered")
        elif result == "failed":
            log.error("turn_store_abandoned", window_s=LATE_STORE_WINDOW_S)
        return result

    async def _bill_lost_message(self, finished: FinishedMessage) -> None:
        """One attempt; a failure is logged like any lost usage."""
        try:
            await self.rows.bill(self.user_id, finished.llm_calls)
        except Exception as exc:
            log.exception("turn_usage_lost", error=type(exc).__name__,
                          calls=len(finished.llm_calls))
