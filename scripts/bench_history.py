"""What a long thread adds to a turn's reads on PostgreSQL, in process: the CPU of a turn's
opening (the turn repository's, app.turn.rows: one statement on PostgreSQL) on a
fresh thread against one with N prior messages, and the CPU of the memory search in a read
transaction against the same search as one statement (Database.one_statement(read_only=True),
what a turn runs).
The opening measured is the only one a turn has: the store's older openings (the thread's
UPDATE then the rows as statements of a transaction, or the one statement called on its
own) are gone, and with them any figure of theirs.

    python scripts/bench_history.py --database-url postgresql+asyncpg://…/DB
        [--messages 100] [--rounds 5] [--turns 20]

Use an EMPTY database you own (it is migrated to head and threads are written to it). Each
round seeds a new long thread (each of its turns adds two messages to it); every opening on
a fresh thread gets a new one. Figures are medians of process CPU time (the gateway's own
cost, not the database's), printed per round.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from sqlalchemy import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.answer.records import FinishedMessage
from app.core.clock import utcnow
from app.followups import memory_repository as memory
from app.store.db import Database
from app.store.migrations import upgrade_to_head
from app.threads import repository as threads
from app.turn.rows import Opened, OpeningRequest, turn_rows

cli = typer.Typer(add_completion=False)
USER = "bench"
#: A question and an answer of the gateway benchmark's sizes (scripts/bench_gateway.py).
QUESTION, ANSWER = "question {n} about the benchmark", "".join(f"w{i} " for i in range(100))


async def new_thread(db: Database, messages: int) -> uuid.UUID:
    """A thread with `messages` prior messages, each turn opened and finished as the
    gateway's are."""
    async with db.transaction() as s:
        thread = await threads.create_thread(s, USER)
    for n in range(messages // 2):
        await open_then_finish(db, thread.id, QUESTION.format(n=n), ANSWER, history_limit=0)
    return thread.id


async def open_then_finish(db: Database, thread_id: uuid.UUID, question: str, answer: str,
                           *, history_limit: int = 200) -> float:
    """CPU seconds of one turn's opening (showing the model up to `history_limit` messages);
    the turn is finished afterwards, untimed."""
    rows = turn_rows(db)
    began = time.process_time()
    opened = await rows.open(OpeningRequest(USER, thread_id, question,
                                            history_limit=history_limit))
    spent = time.process_time() - began
    assert isinstance(opened, Opened), "the thread did not open"
    await rows.finish(FinishedMessage(opened.assistant.id, answer, {}, "complete"))
    return spent


async def opening(db: Database, thread_id: uuid.UUID) -> float:
    """CPU seconds of one turn's opening, of the benchmark's question."""
    return await open_then_finish(db, thread_id, "hello benchmark", "hi")


async def search(db: Database, thread_id: uuid.UUID, one_statement: bool) -> float:
    began = time.process_time()
    reading = (db.one_statement(read_only=True) if one_statement
               else db.transaction(read_only=True))
    async with reading as runner:
        await memory.search_thread(runner, thread_id, "hello benchmark", before=utcnow(),
                                   limit=3)
    return time.process_time() - began


async def median_ms(times: int, measure: Callable[[], Awaitable[float]]) -> float:
    return statistics.median([await measure() for _ in range(times)]) * 1000


async def run(url: str, messages: int, rounds: int, turns: int) -> None:
    await upgrade_to_head(url)
    db = Database(url)
    try:
        for round_ in range(1, rounds + 1):
            long = await new_thread(db, messages)
            fresh = [await new_thread(db, 0) for _ in range(turns)]
            fresh_ms = statistics.median([await opening(db, t) for t in fresh]) * 1000
            long_ms = await median_ms(turns, partial(opening, db, long))
            read_ms = await median_ms(turns * 5, partial(search, db, long, False))
            one_ms = await median_ms(turns * 5, partial(search, db, long, True))
            print(f"round {round_}: opening, fresh thread {fresh_ms:.3f} ms vs {messages} "
                  f"prior messages {long_ms:.3f} ms (added {long_ms - fresh_ms:+.3f} ms); "
                  f"memory search, read transaction {read_ms:.3f} ms vs one statement "
                  f"{one_ms:.3f} ms")
    finally:
        await db.dispose()


@cli.command()
def main(
    database_url: Annotated[str, typer.Option(help="an empty PostgreSQL database you own")],
    messages: Annotated[int, typer.Option(min=2, max=1000)] = 100,
    rounds: Annotated[int, typer.Option(min=1, max=50)] = 5,
    turns: Annotated[int, typer.Option(min=1, max=500)] = 20,
) -> None:
    if make_url(database_url).get_backend_name() != "postgresql":
        raise typer.BadParameter("the figures are PostgreSQL's (the opening's one statement, "
                                 "the memory search's one read); give a PostgreSQL database",
                                 param_hint="--database-url")
    asyncio.run(run(database_url, messages, rounds, turns))


if __name__ == "__main__":
    cli()
