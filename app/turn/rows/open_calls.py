"""The calls without a message while they run (`open_calls`), besides their opening and their
bill (the turn repository's, app.turn.rows): their calls so far written on the checkpoint's
schedule, and the sweep of those whose process died."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Select, bindparam, delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.interruptions import PROCESS_DIED
from app.answer.records import call_of_checkpoint
from app.store.models import OpenCall, table_of
from app.turn.rows.contract import SweptAnswer

OPEN_CALLS = table_of(OpenCall)

_CHECKPOINT = (update(OPEN_CALLS)
               .where(OPEN_CALLS.c.id == bindparam("call"))
               .values(calls=bindparam("entries", type_=OPEN_CALLS.c.calls.type)))


async def checkpoint_calls(s: AsyncSession, calls: Mapping[uuid.UUID, list[dict[str, Any]]]
                           ) -> None:
    """The calls so far of running calls (checkpoint entries, app.answer.records), one
    executemany: a call billed meanwhile has no row left to write."""
    if calls:
        await s.execute(_CHECKPOINT, [{"call": call_id, "entries": entries}
                                      for call_id, entries in calls.items()])


async def sweep_open_calls(s: AsyncSession, live: Select[Any]) -> list[SweptAnswer]:
    """The open calls of processes not in `live` (their ids), deleted, with the calls their
    last checkpoint carried: the caller bills them in the same transaction. A DELETE takes
    each row once, however many processes sweep at once. A row another transaction holds
    (a checkpoint of a process cut off from the database before its COMMIT) is left to a
    later sweep (SKIP LOCKED), as the answers are: a sweep never waits on a lock."""
    orphans = (select(OPEN_CALLS.c.id).where(OPEN_CALLS.c.process_id.not_in(live))
               .with_for_update(skip_locked=True))
    gone = await s.execute(
        delete(OPEN_CALLS).where(OPEN_CALLS.c.id.in_(orphans))
        .returning(OPEN_CALLS.c.user_id, OPEN_CALLS.c.calls))
    return [SweptAnswer(None, None, user_id, [call_of_checkpoint(entry, error=PROCESS_DIED)
                                              for entry in calls or ()])
            for user_id, calls in gone.all()]
