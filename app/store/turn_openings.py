"""PostgreSQL: a user's turn opened in ONE statement, run without BEGIN and COMMIT.

A turn's opening is its thread's UPDATE (the thread's lock, its move to the top of the list),
the history the model is shown, the turn's two rows, the cancel of the thread's follow-ups and
the count of the user's other streams for the stream cap. As statements of a transaction
(app.store.threads.open_for_turn, then app.store.messages.open_exchange) they cost four round
trips with BEGIN and COMMIT; as one statement in autocommit, one. Each round trip costs CPU in
the driver and, under load, waits for passes of the busy event loop; a statement is atomic on
its own, so a refusal in it (a busy thread, the stream cap) stores nothing.

One snapshot serves the whole statement, taken as it starts. An answer whose finish commits
while the UPDATE waits for the thread's lock would be missing from that snapshot's history, and
the model would not see it. Every transaction that writes a thread's messages updates the
thread's row first (an opening, a finish), so the UPDATE asks for the very row version the
snapshot saw (its `xmin`): a newer version leaves the thread unopened and the statement stores
nothing (`changed`); the caller then opens the turn in a transaction, whose statements each
take a snapshot of their own."""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import (
    BindParameter,
    Integer,
    Interval,
    bindparam,
    func,
    insert,
    literal,
    literal_column,
    null,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import aggregate_order_by

from app.clock import utcnow
from app.store import threads
from app.store.db import Runner
from app.store.driver_statements import DriverStatement
from app.store.followups import cancel_pending_statement
from app.store.limits import other_streams_counted
from app.store.messages import (
    MAX_CONTENT_CHARS,
    OpenedExchange,
    assistant_values,
    busy_on_conflict,
    context_select,
    inserted_params,
    inserted_values,
    user_values,
)
from app.store.models import Message, Thread, detached, table_of, unattached
from app.store.ownership import by_key

_MESSAGES, _THREADS = table_of(Message), table_of(Thread)
#: The row times the statement computes: after the thread's newest message (see _times).
_TIMED = ("created_at", "updated_at", "completed_at")
_MICROSECOND = literal(dt.timedelta(microseconds=1), Interval())
_THREAD_PREFIX = "thread_"


@dataclass(frozen=True, slots=True)
class OneStatementOpening:
    """What the statement did. `opened`: the thread and the turn's rows (`exchange`);
    `changed`: the thread changed after the snapshot, nothing stored; `at_cap`: the user's
    other streams (`other_streams`) reached the cap, nothing stored."""

    outcome: Literal["opened", "changed", "at_cap"]
    thread: Thread | None = None
    exchange: OpenedExchange | None = None
    other_streams: int | None = None


async def open_turn_rows(
    s: Runner, user_id: str, thread_id: uuid.UUID, content: str, *, history_limit: int,
    stream_cap: int | None, max_chars: int = MAX_CONTENT_CHARS, process_id: str | None = None,
) -> OneStatementOpening | None:
    """A real user message's turn opened as threads.open_for_turn and then
    messages.open_exchange would (history read before the rows, follow-ups cancelled), in one
    statement, on Database.one_statement's connection. `stream_cap`: the rows are stored
    only when the user's other streaming answers, counted under the user's lock, are fewer;
    None counts nothing. None for a missing or foreign thread. Raises ContentTooLong before any
    statement, ThreadBusy when the thread already streams."""
    now = utcnow()
    user = user_values(thread_id, user_id, content, synthetic=False, trigger_type=None,
                       trigger_reason=None, max_chars=max_chars, now=now)
    assistant = assistant_values(thread_id, user_id, now, process_id)
    params = {"opening_thread": thread_id, "owner": user_id, "now": now, "of_thread": thread_id,
              "context_of": thread_id, "stream_cap": stream_cap,
              **inserted_values(user, "new_user_"), **inserted_values(assistant, "new_assistant_")}
    with busy_on_conflict(thread_id):
        rows = await _statement(history_limit, stream_cap is not None).rows(s, params)
    if not rows:
        return None
    [first] = rows
    if first[_THREAD_PREFIX + "id"] is None:
        return OneStatementOpening("changed")
    if first["user_at"] is None:
        return OneStatementOpening("at_cap", other_streams=int(first["others"]))
    stored_user = _stored(user, first["user_at"], completed=True)
    stored_assistant = _stored(assistant, first["assistant_at"], completed=False)
    history = list(zip(first["roles"] or (), first["contents"] or (), first["times"] or (),
                       strict=True))
    others = int(first["others"]) if stream_cap is not None else None
    exchange = OpenedExchange(stored_user, stored_assistant, history, others)
    return OneStatementOpening("opened", unattached(Thread, first, _THREAD_PREFIX), exchange,
                               others)


def _stored(values: Mapping[str, Any], at: dt.datetime, *, completed: bool) -> Message:
    """A row the statement stored, with the times it gave the row."""
    times: dict[str, dt.datetime | None] = dict.fromkeys(_TIMED, at)
    if not completed:
        times["completed_at"] = None
    return detached(Message, {**values, **times})


@functools.cache
def _statement(limit: int, capped: bool) -> DriverStatement:
    """The opening, built once per history limit and kind. Its CTEs: `found` (the thread's
    row by its key alone, with its version: app.store.ownership's by_key; owned_id would
    read the row a second time for the version), `seen` (its row version in the snapshot,
    if the user owns it; none for a missing or foreign thread: no row comes back),
    `opened` (the UPDATE, of that version only), `counted` (`capped`: the user's lock and
    count, MATERIALIZED and read from `opened`, so it runs once and after the thread's
    lock, in the order every opening takes them), `times`, the two INSERTs (each from
    `opened`, so nothing is stored in a thread left unopened, and under the cap),
    `cancelled` (once the user's row is in) and `history` (_history). One row comes back,
    or none for a missing or foreign thread. No parameter is named as a column of a table
    the statement writes: SQLAlchemy would take it for a value set."""
    found = by_key(_THREADS, _thread_param(), "found",
                   literal_column("threads.xmin").label("version"))
    seen = (select(found.c.version)
            .where(found.c.user_id == bindparam("owner", type_=_THREADS.c.user_id.type))
            .cte("seen"))
    opened = _opened(seen)
    counted = (other_streams_counted(opened.c.user_id, bindparam(
        "new_assistant_id", type_=_MESSAGES.c.id.type)) if capped else None)
    times = _times(opened)
    new_user = _insert("user", times.c.user_at, times, counted)
    new_assistant = _insert("assistant", times.c.assistant_at, times, counted)
    cancelled = cancel_pending_statement(True).where(select(new_user.c.created_at).exists())
    history = _history(limit)
    joined = seen.outerjoin(opened, true())
    if counted is not None:
        joined = joined.outerjoin(counted, true())
    joined = (joined.outerjoin(new_user, true()).outerjoin(new_assistant, true())
              .outerjoin(history, new_user.c.created_at.is_not(None)))
    return DriverStatement(
        select(*(opened.c[column.name].label(_THREAD_PREFIX + column.name)
                 for column in _THREADS.c),
               (counted.c.others if counted is not None else null()).label("others"),
               new_user.c.created_at.label("user_at"),
               new_assistant.c.created_at.label("assistant_at"),
               history.c.roles, history.c.contents, history.c.times)
        .select_from(joined)
        .add_cte(cancelled.cte("cancelled"))
    )


def _history(limit: int) -> Any:
    """The history as three arrays of one row (roles, contents, times), oldest first; NULL
    arrays when the thread has none. A row per message would repeat the thread's columns
    with each, and a long thread's history is hundreds of messages."""
    m = _MESSAGES.c
    newest = context_select(limit, m.role, m.content, m.created_at, m.id).subquery("newest")
    oldest_first = (newest.c.created_at, newest.c.id)
    return select(*(func.array_agg(aggregate_order_by(newest.c[name], *oldest_first)).label(label)
                    for name, label in (("role", "roles"), ("content", "contents"),
                                        ("created_at", "times")))).cte("history")


def _thread_param() -> BindParameter[uuid.UUID]:
    return bindparam("opening_thread", type_=_THREADS.c.id.type)


def _opened(seen: Any) -> Any:
    """The thread's UPDATE (open_for_turn's), of the row version `seen` only, with the time
    of the thread's newest message as the snapshot holds it."""
    version = select(seen.c.version).scalar_subquery()
    return (threads.open_for_turn_update(_thread_param(), owned=False)
            .where(literal_column("threads.xmin") == version).cte("opened"))


def _times(opened: Any) -> Any:
    """The two rows' times, as messages.open_exchange computes them: now, or just after the
    newest message (the user's row), and just after the user's row (the answer's)."""
    user_at = func.greatest(bindparam("new_user_created_at", type_=_MESSAGES.c.created_at.type),
                            opened.c.newest_message_at + _MICROSECOND)
    return select(user_at.label("user_at"), (user_at + _MICROSECOND).label("assistant_at")
                  ).select_from(opened).cte("times")


def _insert(who: str, at: Any, times: Any, counted: Any | None) -> Any:
    """One row's INSERT from `times`, so only in an opened thread; with `counted`, only
    under the cap."""
    values: dict[str, Any] = inserted_params(f"new_{who}_")
    values |= dict.fromkeys(_TIMED, at)
    if who == "assistant":
        values["completed_at"] = null()
    source = select(*values.values()).select_from(times)
    if counted is not None:
        source = source.join(counted, true()).where(
            counted.c.others < bindparam("stream_cap", type_=Integer()))
    return (insert(_MESSAGES).from_select(list(values), source)
            .returning(_MESSAGES.c.created_at).cte(f"new_{who}"))
