"""The sweep of a dead process's turns: its answers still `streaming` closed as `interrupted`
with the usage of the calls their last checkpoint carried, and its open calls deleted, each
with those calls for the caller to bill in the same transaction. The process registry decides
which processes are dead (app.process); the rows it leaves are the turn's, written here."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.interruptions import PROCESS_DIED
from app.answer.recorder import TurnRecorder
from app.answer.records import CallRecord, call_of_checkpoint
from app.store.models import Message
from app.turn.rows.contract import SweptAnswer
from app.turn.rows.messages import CHECKPOINT_CALLS, mark_interrupted
from app.turn.rows.open_calls import sweep_open_calls


async def sweep_dead_answers(s: AsyncSession, live: Select[Any], *, now: dt.datetime
                             ) -> list[SweptAnswer]:
    """`streaming` rows of a process not in `live` (the ids of the processes alive) become
    `interrupted` with reason `process_died`; their content stays what the last checkpoint
    wrote, and their metadata gets the usage of the calls it carried. The open calls of
    those processes are deleted. Returns the answers and open calls swept, with those
    calls. A row another sweep holds is skipped (SKIP LOCKED): it is that sweep's."""
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
