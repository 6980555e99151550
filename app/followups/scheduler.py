"""Schedules the follow-up of a finished reply, in the transaction that stores the reply: the
reply and its follow-up commit together or not at all."""

from __future__ import annotations

import datetime as dt

from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.finish import TurnOutcome
from app.answer.records import FinishedMessage
from app.core.clock import Clock, utcnow
from app.followups import queue_repository as followup_queue
from app.followups.autonomy import Autonomy, cap_reached, effective
from app.followups.triggers import awaiting_of, trigger_for_awaiting, trigger_reason
from app.observe.logging import get_logger
from app.turn.observers.seam import TurnHandler, TurnView
from app.turn.rows import FinishedRow

log = get_logger("followups.scheduler")


class FollowupScheduler:
    """One pending follow-up per enabled thread, at reply end + idle_seconds, unless the
    thread already had max_followups follow-ups since the user last wrote."""

    def __init__(self, defaults: Autonomy, clock: Clock = utcnow) -> None:
        self.defaults = defaults
        self.clock = clock

    def open(self, view: TurnView) -> TurnHandler:
        return _ScheduleHandler(self, view)


class _ScheduleHandler(TurnHandler):
    def __init__(self, scheduler: FollowupScheduler, view: TurnView) -> None:
        self.scheduler = scheduler
        self.view = view

    def may_write_in_finish(self, finished: FinishedMessage, outcome: TurnOutcome) -> bool:
        """A complete reply on a thread whose autonomy was on when the turn opened: one
        turned on since is found by writes_in_finish, its follow-up scheduled just after."""
        return (finished.status == "complete"
                and effective(self.view.thread_autonomy, self.scheduler.defaults).enabled)

    def writes_in_finish(self, finished: FinishedMessage, outcome: TurnOutcome,
                         row: FinishedRow) -> bool:
        """Only a complete reply on a thread whose autonomy is on, as the finish read it:
        the settings may have changed while the reply streamed."""
        return finished.status == "complete" and self._autonomy(row).enabled

    def _autonomy(self, row: FinishedRow) -> Autonomy:
        return effective(row.thread_autonomy, self.scheduler.defaults)

    async def in_finish_transaction(
        self, session: AsyncSession, finished: FinishedMessage, outcome: TurnOutcome,
        row: FinishedRow,
    ) -> None:
        autonomy = self._autonomy(row)  # on: writes_in_finish said so
        thread_id, user_id = self.view.thread_id, self.view.user_id
        consecutive = await followup_queue.consecutive_followups(session, thread_id)
        if cap_reached(consecutive, autonomy.max_followups):
            log.info("followup_cap_reached", consecutive=consecutive,
                     max_followups=autonomy.max_followups)
            return
        awaiting = awaiting_of(finished.metadata.get("response_metadata"))
        trigger = trigger_for_awaiting(awaiting)
        reason = trigger_reason(autonomy.idle_seconds, awaiting)
        due_at = self.scheduler.clock() + dt.timedelta(seconds=autonomy.idle_seconds)
        followup = await followup_queue.schedule_one(
            session, thread_id=thread_id, user_id=user_id, trigger_type=trigger,
            reason=reason, due_at=due_at,
        )
        log.info("followup_scheduled", followup_id=str(followup.id), trigger_type=trigger,
                 reason=reason, due_at=due_at.isoformat(), consecutive=consecutive)
