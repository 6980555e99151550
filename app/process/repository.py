"""Gateway processes and their heartbeats.

A process registers at start, beats every few seconds, and deletes its row on a clean stop.
A process is dead when its heartbeat is older than `dead_after`, or when its row is gone;
its `streaming` rows and its open calls are then swept by whichever live process looks first
(the turn's repository writes them, app.turn.rows.sweeps), and its row is deleted. Times come
from the gateway's clock (hosts must keep it synchronised, NTP), not the database's.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Select, delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.store.models import GatewayProcess


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


def live_processes(cutoff: dt.datetime) -> Select[str]:
    """The ids of the processes alive at `cutoff` (a heartbeat since): a process not among
    them is dead, and its turns are swept (app.turn.rows.sweeps)."""
    return select(GatewayProcess.id).where(GatewayProcess.heartbeat_at >= cutoff)


async def forget_dead_processes(s: AsyncSession, cutoff: dt.datetime) -> None:
    """The rows of the processes dead at `cutoff` deleted, once their turns are swept."""
    await s.execute(delete(GatewayProcess).where(GatewayProcess.heartbeat_at < cutoff))
