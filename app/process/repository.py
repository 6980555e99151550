"""Gateway processes and their heartbeats; the streams of a dead process.

A process registers at start, beats every few seconds, and deletes its row on a clean stop.
A process is dead when its heartbeat is older than `dead_after`, or when its row is gone;
its `streaming` rows and its open calls are then swept by whichever live process looks first,
with the calls their last checkpoint carried (the caller bills them, app.turn.rows). Times come from
the gateway's clock (hosts must keep it synchronised, NTP), not the database's.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.records import CallRecord, call_of_checkpoint
from app.store.models import GatewayProcess, Message
from app.turn.rows import SweptAnswer
from app.turn.rows.messages import CHECKPOINT_CALLS, mark_interrupted
from app.turn.rows.open_calls import sweep_open_calls
from app.turns.interruptions import PROCESS_DIED
from app.turns.recorder import TurnRecorder


async def register_process(
    s: AsyncSession, process_id: str, *, hostname: str, pid: int, now: dt.datetime
) -> None:
    """The process's row, heartbeat now."""
    s.add(GatewayProcess(id=process_id, hostname=hostname, pid=pid, started_at=now,
                         heartbeat_at=now))
    await s.flush()


async def beat(s: AsyncSession, process_id: str, *, hostname: str, pid: int,
               now: dt.datetime) -> None:
    """Refresh the heartbeat; re-register when another process swept this one's row (it
    looked dead through a database outage longer than dead_after)."""
    result = await s.execute(
        update(GatewayProcess).where(GatewayProcess.id == process_id).values(heartbeat_at=now))
    if result.rowcount == 0:  # type: ignore[attr-defined]
        await register_process(s, process_id, hostname=hostname, pid=pid, now=now)


async def unregister_process(s: AsyncSession, process_id: str) -> None:
    await s.execute(delete(GatewayProcess).where(GatewayProcess.id == process_id))


async def sweep_dead_processes(s: AsyncSession, *, now: dt.datetime,
                               dead_after: dt.timedelta) -> list[SweptAnswer]:
    """`streaming` rows of a process that is dead (heartbeat older than dead_after, or no
    row at all) become `interrupted` with reason `process_died`; their content stays what
    the last checkpoint wrote, and their metadata gets the usage of the calls it carried.
    Its open calls are deleted. The dead processes' rows are deleted. Returns the answers
    and open calls swept, with those calls."""
    cutoff = now - dead_after
    live = select(GatewayProcess.id).where(GatewayProcess.heartbeat_at >= cutoff)
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
    await s.execute(delete(GatewayProcess).where(GatewayProcess.heartbeat_at < cutoff))
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
