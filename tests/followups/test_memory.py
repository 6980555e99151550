"""Full-text memory search on real SQLite (FTS5) and PostgreSQL (tsvector + GIN)."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import text

from app.core.clock import utcnow
from app.followups import memory_repository as memory
from app.store.db import Database
from app.threads import repository as thread_store
from app.turn.rows import Fork
from tests.store.factories import finish, legacy_prompt, new_thread, open_rows, turn

FAR_FUTURE = utcnow() + dt.timedelta(days=1)


def test_search_terms_drop_noise_and_syntax() -> None:
    assert memory.search_terms('What about the "Zeppelin" AND airships -- OR NOT?') == [
        "zeppelin", "airships"]
    assert memory.search_terms("a an of to") == []
    assert memory.search_terms("x" * 5 + " " + " ".join(f"w{i:03d}" for i in range(40)))[:2] == [
        "xxxxx", "w000"]
    assert len(memory.search_terms(" ".join(f"word{i}" for i in range(40)))) == memory.MAX_TERMS


async def test_finds_the_relevant_older_message_only(db: Database) -> None:
    thread = await new_thread(db)
    other = await new_thread(db)
    old_q, _ = await turn(db, thread, "Tell me about zeppelin airships", "They float.")
    await turn(db, thread, "What is a bicycle?", "Two wheels.")
    await turn(db, other, "Zeppelin in another thread", "Not yours.")
    async with db.transaction() as s:
        found = await memory.search_thread(s, thread.id, "zeppelins again?",
                                           before=FAR_FUTURE, limit=5)
        assert [m.id for m in found] == [old_q.id]  # stemmed: zeppelins ~ zeppelin
        assert await memory.search_thread(s, thread.id, "zeppelin",
                                          before=old_q.created_at, limit=5) == []
        assert await memory.search_thread(s, thread.id, "the and", before=FAR_FUTURE,
                                          limit=5) == []


async def test_the_threads_own_messages_decide_which_memory_comes_first(db: Database
                                                                       ) -> None:
    """The message that speaks most of the asked words comes first, whatever other users'
    threads hold: a word common elsewhere does not push this thread's best match down."""
    thread = await new_thread(db, "alice")
    mostly, _ = await turn(db, thread, "zeppelin zeppelin zeppelin, and an airship",
                              "A dirigible.")
    airship, _ = await turn(db, thread, "one airship", "Noted.")
    order = {}
    for name in ("alone", "crowded"):
        if name == "crowded":
            crowd = await new_thread(db, "bob")
            for n in range(30):
                await turn(db, crowd, f"zeppelin number {n}", "ok")
        async with db.transaction() as s:
            found = await memory.search_thread(s, thread.id, "zeppelin airship",
                                               before=FAR_FUTURE, limit=2)
        order[name] = [m.id for m in found]
    assert order["alone"] == order["crowded"] == [mostly.id, airship.id]


async def test_synthetic_prompts_are_never_memories(db: Database) -> None:
    thread = await new_thread(db)
    synthetic = await open_rows(db, thread, "Continue our conversation about volcanoes",
                                synthetic=True, trigger_type="check_in", trigger_reason="r")
    await finish(db, synthetic.assistant.id, "", status="failed", calls=[])
    await legacy_prompt(db, thread, "[AUTONOMOUS_FOLLOWUP: volcanoes]")
    real = (await open_rows(db, thread, "volcanoes erupt")).user
    assert real is not None
    async with db.transaction() as s:
        found = await memory.search_thread(s, thread.id, "volcanoes", before=FAR_FUTURE,
                                           limit=5)
        assert [m.id for m in found] == [real.id]
        last = await memory.last_real_user_message(s, thread.id)
        assert last is not None and last.id == real.id


async def test_a_version_the_user_replaced_is_never_a_memory(db: Database) -> None:
    """An edited question and its answers left the branch: the model is not shown them
    again as memories, and the user's last words are the edited ones."""
    thread = await new_thread(db)
    replaced, _ = await turn(db, thread, "Tell me about zeppelin airships", "They float.")
    edited, _ = await turn(db, thread, "Tell me about hot air balloons", "They rise.",
                           fork=Fork(None))
    async with db.transaction() as s:
        assert await memory.search_thread(s, thread.id, "zeppelin float", before=FAR_FUTURE,
                                          limit=5) == []
        found = await memory.search_thread(s, thread.id, "balloons", before=FAR_FUTURE,
                                           limit=5)
        last = await memory.last_real_user_message(s, thread.id)
    assert [m.id for m in found] == [edited.id] and last is not None and last.id == edited.id
    assert replaced.id != edited.id


async def test_finished_reply_content_is_searchable_and_deletes_clean_up(db: Database) -> None:
    thread = await new_thread(db)
    _, reply = await turn(db, thread, "hello", "The answer mentions quasars.")
    async with db.transaction() as s:
        found = await memory.search_thread(s, thread.id, "quasar", before=FAR_FUTURE, limit=5)
    assert [m.id for m in found] == [reply.id]  # indexed when finished (was empty when opened)
    async with db.transaction() as s:
        await thread_store.delete_thread(s, thread.user_id, thread.id)
    if db.backend == "sqlite":
        async with db.transaction() as s:
            left = await s.scalar(text("SELECT count(*) FROM message_search"))
            fts = await s.scalar(text("SELECT count(*) FROM messages_fts WHERE messages_fts "
                                      "MATCH 'quasars'"))
        assert (left, fts) == (0, 0)


# PostgreSQL only: SQLite's counterpart is the FTS5 table, tested above.
@pytest.mark.parametrize("backend", [pytest.param("postgresql", marks=pytest.mark.postgres)])
async def test_postgresql_uses_the_gin_expression_index(db: Database) -> None:
    async with db.transaction() as s:
        await s.execute(text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(r[0] for r in await s.execute(text(
            "EXPLAIN SELECT id FROM messages WHERE to_tsvector('english'::regconfig, content) "
            "@@ websearch_to_tsquery('english'::regconfig, 'zeppelin')")))
    assert "ix_messages_content_fts" in plan



# SQLite only: PostgreSQL's plan is the planner's (the GIN index beside the thread index).
@pytest.mark.parametrize("backend", ["sqlite"])
async def test_a_search_starts_from_the_threads_matches(db: Database) -> None:
    """A search reads the full-text index first, for the thread's token and its terms, then
    each match's row: it never walks the thread's messages probing the index once for each
    (2 ms a search, even for a word that is nowhere), nor every match of a common word in the
    whole database (25 ms with 10,000 of them; 0.6 ms now)."""
    thread = await new_thread(db)
    await turn(db, thread, "Tell me about zeppelin airships", "They float.")
    compiled = memory._SEARCH.sqlite.statement.statement.compile(dialect=db.engine.dialect)
    async with db.transaction() as s:
        connection = await s.connection()
        plan = [row[3] for row in await connection.exec_driver_sql(
            "EXPLAIN QUERY PLAN " + str(compiled), (None,) * len(compiled.positiontup or ()))]
        match = memory.sqlite_match(thread.id, ["zeppelin"])
        assert await s.scalar(text(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH :m"), {"m": match}) == 1
    assert plan[0].startswith("SCAN messages_fts VIRTUAL TABLE"), plan
    assert not any("ix_messages_thread_created" in step for step in plan), plan
