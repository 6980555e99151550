"""Gateway processes and their heartbeats.

A process registers at start, beats every few seconds, and deletes its row on a clean stop.
A process is dead when its heartbeat is older than `dead_after`, or when its row is gone;
its `streaming` rows and its open calls are then swept by whichever live process looks first
(the turn's repository writes them, app.turn.rows.sweeps), and its row is deleted. Times come
from the gateway's clock (hosts must keep it synchronised, NTP), not the database's.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import ColumnElement, Select, and_, case, delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.store.models import GatewayProcess


async def register_process(
    s: AsyncSession, process_id: str, *, hostname: str, pid: int, now: dt.datetime,
    lease_until: dt.datetime | None = None,
) -> None:
    """The process's row, heartbeat now, its lease until `lease_until` (app.config.fencing)."""
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


def _alive(now: dt.datetime, dead_after: dt.timedelta) -> ColumnElement[bool]:
    """A process is alive while its heartbeat is younger than dead_after, or its lease (the
    time it promised to have ended its own answers by, app.gateway.fencing) is not over."""
    return or_(GatewayProcess.heartbeat_at >= now - dead_after,
               and_(GatewayProcess.lease_until.is_not(None), GatewayProcess.lease_until >= now))


def live_processes(now: dt.datetime, dead_after: dt.timedelta) -> Select[str]:
    """The ids of the processes alive at `now`: a process not among them is dead, and its
    turns are swept (app.turn.rows.sweeps); that takeover makes its rows `interrupted`, after
    which its own late finish of them stores nothing."""
    return select(GatewayProcess.id).where(_alive(now, dead_after))


async def forget_dead_processes(s: AsyncSession, now: dt.datetime,
                                dead_after: dt.timedelta) -> None:
    """The rows of the processes dead at `now` deleted, once their turns are swept. A row
    another transaction holds is left to a later sweep (SKIP LOCKED), never waited for: a
    process cut off from the database between its heartbeat's UPDATE and its COMMIT holds
    its row on the server until the server ends that session, and a sweep waiting for it
    would hold the answers it took over, and its server connection with them: at the
    statement timeout the gateway gives up, but the server does not see that while the
    statement waits on a lock."""
    dead = (select(GatewayProcess.id).where(~_alive(now, dead_after))
            .with_for_update(skip_locked=True))
    await s.execute(delete(GatewayProcess).where(GatewayProcess.id.in_(dead)))
