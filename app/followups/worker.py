"""The follow-up worker: runs in every gateway process, polls for due follow-ups, claims them
atomically with a lease, and runs each as a normal turn whose user message is the synthetic
prompt (same pipeline, filter included; the reply is an ordinary visible message).

Exactly once: the claim is one statement; just before the synthetic message is stored, inside
that same transaction (open_turn's guard), the worker checks the claim is still its own, that
the user has not written since the follow-up was scheduled, and that no earlier attempt already
started it. A worker that dies mid-turn leaves a claim whose lease runs out; the next claim of
it sees the started turn and settles it as failed instead of running it again."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import socket
import uuid
from contextlib import aclosing
from typing import Literal

import structlog
from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.interruptions import SHUTTING_DOWN
from app.core.clock import Clock, utcnow
from app.followups import queue_repository as followup_queue
from app.followups.autonomy import Autonomy, effective
from app.followups.queue_repository import Claim
from app.followups.thread_settings import default_autonomy
from app.followups.triggers import prompt_for
from app.kit.shield import run_shielded
from app.observe.logging import get_logger
from app.store.errors import ThreadBusy
from app.turn.admission.opening import ThreadNotFound
from app.turn.deps import TurnDeps
from app.turn.holds.slots import GatewayBusy
from app.turn.native.turn import Turn, open_turn
from app.turn.rows import ThreadGuard

log = get_logger("followups.worker")

#: Follow-up turns one process runs at the same time.
DEFAULT_CONCURRENCY = 4


class FollowupBlocked(Exception):
    """The claimed follow-up must not run (raised in open_turn's transaction: nothing stored)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def make_worker_id() -> str:
    """host:pid:random, unique per process start (a restarted pid is a new worker)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class FollowupWorker:
    def __init__(self, deps: TurnDeps, *, worker_id: str | None = None,
                 concurrency: int = DEFAULT_CONCURRENCY, clock: Clock = utcnow) -> None:
        settings = deps.settings
        self.deps = deps
        #: What "now" is for due times, leases and settling (tests move it by hand).
        self.clock = clock
        self.worker_id = worker_id or make_worker_id()
        self.concurrency = concurrency
        self.poll_s = settings.followup_poll_s
        self.lease = dt.timedelta(seconds=settings.followup_lease_s)
        self.max_attempts = settings.followup_max_attempts
        self.defaults: Autonomy = default_autonomy(settings)
        self._running: set[asyncio.Task[None]] = set()
        #: The turns those tasks run, once open: a shutdown says it stopped them.
        self._turns: set[Turn] = set()

    async def run(self) -> None:
        """Poll until cancelled (the lifespan's background task)."""
        log.info("followup_worker_started", worker_id=self.worker_id, poll_s=self.poll_s,
                 lease_s=self.lease.total_seconds(), max_attempts=self.max_attempts)
        try:
            while True:
                try:
                    await self.poll_once()
                except Exception as exc:
                    log.exception("followup_poll_failed", error=type(exc).__name__)
                await asyncio.sleep(self.poll_s)
        finally:
            await self._cancel_running()

    async def poll_once(self) -> int:
        """Claim what is due (up to the free slots) and start running it; returns how many."""
        free = self.concurrency - len(self._running)
        if free <= 0:
            return 0
        now = self.clock()
        async with self.deps.db.transaction() as session:
            failed = await followup_queue.fail_exhausted(
                session, now=now, max_attempts=self.max_attempts)
            claims = await followup_queue.claim_due(
                session, worker_id=self.worker_id, now=now, lease=self.lease,
                max_attempts=self.max_attempts, limit=free)
        if failed:
            log.warning("followups_exhausted", count=failed, max_attempts=self.max_attempts)
        for claim in claims:
            task = asyncio.create_task(self._run_claim(claim), name=f"followup-{claim.id}")
            self._running.add(task)
            task.add_done_callback(self._running.discard)
        return len(claims)

    async def _cancel_running(self) -> None:
        """The process is shutting down: each turn running is stopped for that, which its
        row says."""
        for turn in self._turns:
            turn.stopping(SHUTTING_DOWN)
        for task in list(self._running):
            task.cancel()
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)

    # -- one follow-up ----------------------------------------------------------------

    async def _run_claim(self, claim: Claim) -> None:
        # No HTTP request behind a follow-up turn: its request id names the follow-up, so
        # every turn line still carries one (grep it like any request's).
        structlog.contextvars.bind_contextvars(
            request_id=f"followup-{claim.id}", followup_id=str(claim.id),
            thread_id=str(claim.thread_id), user_id=claim.user_id,
            trigger_type=claim.trigger_type)
        log.info("followup_claimed", attempt=claim.attempts, worker_id=self.worker_id,
                 due_at=claim.due_at.isoformat(), reason=claim.reason)
        turn: Turn | None = None
        try:
            turn = await self._open(claim)
            if turn is None:
                return
            self._turns.add(turn)
            status = await self._drive(claim, turn)
            # "done" only when the reply really is in the database: a follow-up whose answer
            # was lost is a failed one (and stays visible as such to operators).
            done = status == "complete" and turn.stored
            settled = await self._settle(claim, "done" if done else "failed")
            log.info("followup_finished", turn_status=status, message_id=str(turn.message_id),
                     settled=settled)
        except asyncio.CancelledError:
            # Shutting down (a deploy): a follow-up that has not started goes back to the
            # queue for the next process; one whose prompt is stored must never run again.
            if turn is None:
                await run_shielded(self._release_quietly(claim))
            else:
                await run_shielded(self._settle_quietly(claim, "failed"))
            raise
        except Exception as exc:
            log.exception("followup_error", error=type(exc).__name__)
            await self._settle_quietly(claim, "failed")
        finally:
            if turn is not None:
                self._turns.discard(turn)

    async def _open(self, claim: Claim) -> Turn | None:
        """The synthetic turn, or None when it must not run (settled here)."""
        try:
            return await open_turn(
                self.deps, claim.user_id, claim.thread_id, prompt_for(claim.trigger_type),
                synthetic=True, trigger_type=claim.trigger_type, trigger_reason=claim.reason,
                guard=self._guard(claim),
            )
        except FollowupBlocked as blocked:
            await self._blocked(claim, blocked.reason)
        except (ThreadBusy, GatewayBusy):  # nothing stored: the same follow-up, later
            await self._retry_later(claim)
        except ThreadNotFound:
            log.info("followup_thread_gone")  # deleted: the follow-up row went with it
        return None

    def _guard(self, claim: Claim) -> ThreadGuard:
        async def guard(session: AsyncSession, thread_id: uuid.UUID) -> None:
            autonomy = await followup_queue.lock_thread(session, thread_id)
            reason: str | None = await followup_queue.blocker(session, claim)
            if reason is None and not effective(autonomy, self.defaults).enabled:
                reason = "autonomy_disabled"
            if reason is not None:
                raise FollowupBlocked(reason)

        return guard

    async def _drive(self, claim: Claim, turn: Turn) -> str:
        """Consume the turn's events (no client: the reply reaches the page through the
        message bus), keeping the lease alive while it streams."""
        keeper = asyncio.create_task(self._keep_lease(claim))
        try:
            async with aclosing(turn.events()) as events:
                async for _ in events:
                    pass
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        return turn.status

    async def _keep_lease(self, claim: Claim) -> None:
        while True:
            await asyncio.sleep(self.lease.total_seconds() / 3)
            try:
                async with self.deps.db.transaction() as session:
                    mine = await followup_queue.renew_lease(
                        session, claim, self.clock() + self.lease)
            except Exception as exc:  # try again next time; the turn goes on regardless
                log.warning("followup_lease_renew_failed", error=type(exc).__name__)
                continue
            if not mine:
                log.warning("followup_claim_lost")
                return

    async def _blocked(self, claim: Claim, reason: str) -> None:
        now = self.clock()
        if reason == "lost_claim":
            log.warning("followup_claim_lost")
            return
        if reason == "already_started":
            # An earlier attempt stored the synthetic prompt and its process died: never a
            # second run; its reply, if still `streaming`, is settled as interrupted.
            async with self.deps.db.transaction() as session:
                interrupted = await followup_queue.interrupt_orphaned_replies(
                    session, claim.thread_id, claim.created_at, now)
                await followup_queue.finish_claim(session, claim, "failed", now)
            log.warning("followup_already_started", interrupted_replies=interrupted)
            return
        await self._settle(claim, "cancelled")
        log.info("followup_cancelled", reason=reason)

    async def _retry_later(self, claim: Claim) -> None:
        """The thread is streaming something else, or every upstream slot is taken: try
        again later, a few times. (The user's stream cap and budget do not apply here: see
        app.turn.admission.gate.)"""
        if claim.attempts >= self.max_attempts:
            await self._settle(claim, "failed")
            log.warning("followup_failed_thread_busy", attempts=claim.attempts)
            return
        retry_at = self.clock() + dt.timedelta(seconds=max(self.poll_s, 1.0) * claim.attempts)
        async with self.deps.db.transaction() as session:
            await followup_queue.release_for_retry(session, claim, retry_at)
        log.info("followup_retry_later", retry_at=retry_at.isoformat(), attempts=claim.attempts)

    async def _release_quietly(self, claim: Claim) -> None:
        """Give an unstarted claim back, due now. Should this fail too, its lease runs out and
        it is claimed again all the same; were its prompt stored after all, the next claim
        sees `already_started` and never runs it twice."""
        try:
            async with self.deps.db.transaction() as session:
                await followup_queue.release_for_retry(session, claim, self.clock())
            log.info("followup_released_on_shutdown", attempts=claim.attempts)
        except Exception as exc:
            log.warning("followup_release_failed", error=type(exc).__name__)

    async def _settle(self, claim: Claim, status: Literal["done", "failed", "cancelled"]) -> bool:
        async with self.deps.db.transaction() as session:
            return await followup_queue.finish_claim(session, claim, status, self.clock())

    async def _settle_quietly(
        self, claim: Claim, status: Literal["done", "failed", "cancelled"]
    ) -> None:
        try:
            await self._settle(claim, status)
        except Exception as exc:
            log.warning("followup_settle_failed", error=type(exc).__name__)


