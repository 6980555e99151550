"""The thread list's search (GET /api/threads?q=): titles and visible text, every word, the
last as a prefix, the user's own threads only; on both databases."""

from __future__ import annotations

from app.store.db import Database
from app.threads.search_repository import matching_thread_ids, search_words
from app.threads.service import list_threads
from tests.e2e.helpers import keyed_client, new_thread
from tests.store.factories import finish, open_rows, turn
from tests.store.factories import new_thread as stored_thread
from tests.support.gateway import LiveGateway, post_turn


def test_only_word_characters_reach_a_query() -> None:
    assert search_words('Tides "AND" moons* OR -x (tides)') == ["tides", "and", "moons", "or", "x"]
    assert search_words("%_'\";") == []


async def test_titles_and_text_match_every_word_the_last_as_a_prefix(db: Database) -> None:
    tides = await stored_thread(db, "alice", "Tides and moons")
    await turn(db, tides, "Why are there two tides a day?", "Because of **the Moon**.")
    bikes = await stored_thread(db, "alice", "Bike repair")
    await turn(db, bikes, "My chain slips", "Check the derailleur and the chain wear.")
    await stored_thread(db, "alice", "100% sure_thing")
    theirs = await stored_thread(db, "bob", "Tides elsewhere")
    await turn(db, theirs, "tides", "tides derailleur")

    async def titles(query: str) -> list[str | None]:
        return [t["title"] for t in await list_threads(db, "alice", query)]

    assert await titles("moons") == ["Tides and moons"]  # the title
    assert await titles("DERAILLEUR") == ["Bike repair"]  # an answer's word
    assert await titles("chain derail") == ["Bike repair"]  # every word, the last a prefix
    assert await titles("chain moon") == []
    assert await titles("slip") == ["Bike repair"]  # the user's own words, stemmed or prefixed
    assert await titles("tide") == ["Tides and moons"]  # never bob's
    assert await titles("0% s") == ["100% sure_thing"]  # a title's characters are literal
    assert await titles("%") == ["100% sure_thing"]
    assert len(await titles("  ")) == 3  # no query: every thread


async def test_what_the_user_does_not_see_is_not_found(db: Database) -> None:
    thread = await stored_thread(db, "alice", "Plain")
    followup = await open_rows(db, thread, "Continue our conversation about zeppelins.",
                               synthetic=True, trigger_type="check_in", trigger_reason="idle")
    await finish(db, followup.assistant.id, "", status="failed", calls=[])
    async with db.transaction(read_only=True) as session:
        assert await matching_thread_ids(session, "alice", "zeppelins") == set()


async def test_over_http(gateway: LiveGateway) -> None:
    async with await keyed_client(gateway, "searcher") as client:
        first = await new_thread(client, "Tides")
        await new_thread(client, "Bikes")
        assert (await post_turn(client, first, "Tell me about lighthouses")).status_code == 200
        found = await client.get("/api/threads", params={"q": "lighthouse"})
        everything = await client.get("/api/threads", params={"q": ""})
        long = await client.get("/api/threads", params={"q": "x" * 201})
        nul = await client.get("/api/threads", params={"q": "a\x00b"})
    assert [t["id"] for t in found.json()["threads"]] == [first]
    assert len(everything.json()["threads"]) == 2
    for refused in (long, nul):
        assert (refused.status_code, refused.json()["error"]["code"]) == (422, "invalid_query")


