"""Gateway processes and their heartbeats; the streams of a dead process.

A process registers at start, beats every few seconds, and deletes its row on a clean stop.
A process is dead when its heartbeat is older than `dead_after`, or when its row is gone;
its `streaming` rows and its open calls are then swept by whichever live process looks first,
with the calls their last checkpoint carried (the caller bills them, app.turn.rows). Times come from
the gateway's clock (hosts must keep it synchronised, NTP), not the database's.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import and_, case, delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.records import CallRecord, call_of_checkpoint
from app.store.models import GatewayProcess, Message
from app.turn.rows import SweptAnswer
from app.turn.rows.messages import CHECKPOINT_CALLS, mark_interrupted
from app.turn.rows.open_calls import sweep_open_calls
from app.turns.interruptions import PROCESS_DIED
from app.turns.recorder import TurnRecorder


async def register_process(
    s: AsyncSession, process_id: str, *, hostname: str, pid: int, now: dt.datetime,
    lease_until: dt.datetime | None = None,
) -> None:
    """The process's row, heartbeat now, its lease until `lease_until` (app.fencing)."""
    s.add(GatewayProcess(id=process_id, hostname=hostname, pid=pid, started_at=now,
                         heartbeat_at=now, lease_until=lease_until))
    await s.flush()


async def beat(s: AsyncSession, process_id: str, *, hostname: str, pid: int,
               now: dt.datetime, lease_until: dt.datetime | None = None) -> bool:
    """Refresh the heartbeat and the lease, never backwards (a beat that reached the server
    late, after a newer one, changes nothing); re-register when another process swept this
    one's row (it looked dead through a database outage longer than dead_after). Returns
    False when it had to: the answers of the row's earlier lease were taken over."""
    row = GatewayProcess.__table__.c
    result = await s.execute(
        update(GatewayProcess).where(GatewayProcess.id == process_id).values(
            heartbeat_at=case((row.heartbeat_at < now, now), else_=row.heartbeat_at),
            lease_until=case((or_(row.lease_until.is_(None), row.lease_until < lease_until),
                              lease_until), else_=row.lease_until)
            if lease_until is not None else row.lease_until))
    if result.rowcount == 0:  # type: ignore[attr-defined]
        await register_process(s, process_id, hostname=hostname, pid=pid, now=now,
                               lease_until=lease_until)
        return False
    return True


async def unregister_process(s: AsyncSession, process_id: str) -> None:
    await s.execute(delete(GatewayProcess).where(GatewayProcess.id == process_id))


async def sweep_dead_processes(s: AsyncSession, *, now: dt.datetime,
                               dead_after: dt.timedelta) -> list[SweptAnswer]:
    """`streaming` rows of a process that is dead (heartbeat older than dead_after and its
    lease over, or no row at all) become `interrupted` with reason `process_died`: the
    takeover, after which the process's own finish of them stores nothing; their content stays what
    the last checkpoint wrote, and their metadata gets the usage of the calls it carried.
    Its open calls are deleted. The dead processes' rows are deleted. Returns the answers
    and open calls swept, with those calls."""
    cutoff = now - dead_after
    alive = or_(GatewayProcess.heartbeat_at >= cutoff,
                and_(GatewayProcess.lease_until.is_not(None), GatewayProcess.lease_until >= now))
    live = select(GatewayProcess.id).where(alive)
    orphans = await s.execute(
        select(Message)
        .where(Message.status == "streaming", Message.stream_process.is_not(None),
               Message.stream_process.not_in(live))
        .with_for_update(skip_locked=True)
    )
    rows = list(orphans.scalars())
    swept = [_with_checkpointed_usage(message) for message in rows]
    await mark_interrupted(s, rows, reason=PROCESS_DIED, now=now)
    swept += await sweep_open_calls(s, live)
    await s.execute(delete(GatewayProcess).where(~alive))
    return swept


def _with_checkpointed_usage(message: Message) -> SweptAnswer:
    """The swept answer with its checkpointed calls; the row's metadata says their usage
    as a finish would (tokens, cost, `usage_source` partial, processingDetails.llm_calls)
    instead of the checkpoint's own entries."""
    meta = dict(message.meta)
    entries = meta.pop(CHECKPOINT_CALLS, None) or []
    calls: list[CallRecord] = [call_of_checkpoint(entry, error=PROCESS_DIED)
                               for entry in entries]
    if calls:
        recorder = TurnRecorder(calls=calls)
        meta |= {**recorder.totals(), "model": calls[-1].model,
                 "processingDetails": {"llm_calls": [call.as_metadata() for call in calls]}}
    message.meta = meta
    return SweptAnswer(message.id, message.thread_id, message.user_id, calls)
