"""The admin usage report and the refusals over real HTTP: an in-process gateway
(tests.support.gateway) on SQLite and on PostgreSQL, usage seeded through the turn repository
(tests/usage/admin_seed.py), every figure compared with the seeded calls' own sums."""

from __future__ import annotations

import asyncio
import csv
import io
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from app.store.db import Database
from app.store.models import RefusalCount
from tests.support.gateway import DemoLlm, InProcessGateway, LiveGateway, StartGateway, post_turn
from tests.usage import admin_seed
from tests.usage.admin_seed import DAY1, DAY2, DAY3, REFUSALS, expected

RANGE = {"start": DAY1.isoformat(), "end": DAY3.isoformat()}


@pytest.fixture(scope="module")
def seeded(gateway: InProcessGateway) -> InProcessGateway:
    async def seed() -> None:
        db = Database(gateway.database_url)
        patch = pytest.MonkeyPatch()
        try:
            await admin_seed.seed(db, patch)
        finally:
            patch.undo()
            await db.dispose()

    asyncio.run(seed())
    return gateway


async def _admin(gateway: LiveGateway) -> httpx.AsyncClient:
    return gateway.client(await gateway.api_key("root", admin=True))


async def _report(client: httpx.AsyncClient, **params: Any) -> dict[str, Any]:
    response = await client.get("/api/admin/usage/report", params={**RANGE, **params})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _cost(value: Any) -> float | None:
    return None if value is None else float(value)


async def test_by_day_and_model_sums_every_users_calls(seeded: LiveGateway) -> None:
    async with await _admin(seeded) as client:
        answer = await _report(client, group_by="day,model")
    want = expected("day", "model")
    got = {(r["day"], r["model"]): r for r in answer["rows"]}
    assert list(got) == sorted(want.tokens)  # day order, then model
    for key, row in got.items():
        assert row["total_tokens"] == want.tokens[key]
        assert row["llm_call_count"] == want.calls[key]
        assert row["cost_usd"] == pytest.approx(_cost(want.cost[key]))
    # an unpriced model: cost unknown, not 0, with the calls it is missing
    assert got[(DAY3.isoformat(), "local-llama")]["cost_usd"] is None
    assert got[(DAY3.isoformat(), "local-llama")]["unpriced_call_count"] == 1
    totals = answer["totals"]
    assert totals["total_tokens"] == sum(want.tokens.values())
    assert totals["message_count"] == len(admin_seed.TURNS)
    assert totals["unpriced_call_count"] == 1
    assert answer["source"] == "rollup" and answer["group_by"] == ["day", "model"]
    assert answer["page"] == {"offset": 0, "limit": 100, "total_rows": len(want.tokens),
                              "next_offset": None}


async def test_top_users_come_first_and_pages_follow_each_other(seeded: LiveGateway) -> None:
    pages: list[dict[str, Any]] = []
    async with await _admin(seeded) as client:
        offset: int | None = 0
        while offset is not None and len(pages) < 10:
            pages.append(await _report(client, group_by="user", limit=2, offset=offset))
            offset = pages[-1]["page"]["next_offset"]
    want = expected("user")
    ranked = sorted(want.tokens, key=lambda k: (-want.tokens[k], k))
    assert [r["user_id"] for p in pages for r in p["rows"]] == [k[0] for k in ranked]
    assert [p["page"]["offset"] for p in pages] == [0, 2, 4, 6]
    assert pages[0]["page"] == {"offset": 0, "limit": 2, "total_rows": 7, "next_offset": 2}
    assert len(pages[-1]["rows"]) == 1
    assert all(p["totals"] == pages[0]["totals"] for p in pages)  # the range's, any page
    alice = pages[0]["rows"][0]
    assert alice["user_id"] == "alice" and alice["message_count"] == 2


async def test_rows_and_totals_of_chosen_users(seeded: LiveGateway) -> None:
    async with await _admin(seeded) as client:
        response = await client.get("/api/admin/usage/report", params=[
            *RANGE.items(), ("group_by", "day,user"), ("user_id", "bob"),
            ("user_id", "carol"), ("user_id", "nobody")])
        too_many = await client.get("/api/admin/usage/report", params=[
            ("user_id", f"u{n}") for n in range(21)])
        control = await client.get("/api/admin/usage/report", params={"user_id": "a\tb"})
    answer = response.json()
    want = expected("day", "user")
    assert {(r["day"], r["user_id"]): r["total_tokens"] for r in answer["rows"]} == {
        key: n for key, n in want.tokens.items() if key[1] in ("bob", "carol")}
    assert answer["user_ids"] == ["bob", "carol", "nobody"]
    assert answer["totals"]["total_tokens"] == sum(
        n for key, n in want.tokens.items() if key[1] in ("bob", "carol"))
    assert too_many.status_code == 422 and "at most 20" in too_many.json()["error"]["message"]
    assert control.status_code == 422
    assert control.json()["error"]["code"] == "invalid_user_id"


async def test_the_split_between_main_title_and_summary_calls(seeded: LiveGateway) -> None:
    async with await _admin(seeded) as client:
        stages = await _report(client, group_by="stage")
        per_day = await _report(client, group_by="day,stage")
        rollup = await _report(client, group_by="day")
    want = expected("stage")
    got = {r["stage"]: r for r in stages["rows"]}
    assert set(got) == {"main", "title", "summary"}
    for (stage,), tokens in want.tokens.items():
        assert got[stage]["total_tokens"] == tokens
        assert got[stage]["llm_call_count"] == want.calls[(stage,)]
        assert got[stage]["message_count"] is None  # a call is not a message
    assert stages["source"] == "llm_calls"
    # the raw calls add up to what the rollup holds
    for name in ("total_tokens", "llm_call_count", "cost_usd", "unpriced_call_count"):
        assert stages["totals"][name] == pytest.approx(rollup["totals"][name])
    want_daily = expected("day", "stage")
    assert {(r["day"], r["stage"]): r["total_tokens"] for r in per_day["rows"]} \
        == dict(want_daily.tokens)


async def test_refusals_by_day_and_reason(seeded: LiveGateway) -> None:
    async with await _admin(seeded) as client:
        response = await client.get("/api/admin/refusals", params=RANGE)
        one_day = (await client.get("/api/admin/refusals", params={
            "start": DAY2.isoformat(), "end": DAY2.isoformat()})).json()
    answer = response.json()
    assert response.status_code == 200
    assert [(r["day"], r["reason"], r["refusal_count"]) for r in answer["rows"]] == sorted(
        (d.isoformat(), reason, n) for d, reason, n in REFUSALS)
    assert answer["totals"] == {"budget_exceeded": 2, "rate_limited": 7, "too_many_streams": 1}
    assert answer["total"] == 10
    assert one_day["totals"] == {"budget_exceeded": 2}


async def test_csv_holds_every_row_of_the_json(seeded: LiveGateway) -> None:
    async with await _admin(seeded) as client:
        answer = await _report(client, group_by="day,model")
        response = await client.get("/api/admin/usage/report",
                                    params={**RANGE, "group_by": "day,model", "format": "csv",
                                            "limit": 1})
        refusals = await client.get("/api/admin/refusals", params={**RANGE, "format": "csv"})
    assert response.headers["content-type"].startswith("text/csv")
    assert "attachment" in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert len(rows) == len(answer["rows"])  # no page: the whole range
    assert list(rows[0])[:3] == ["day", "model", "total_tokens"]
    for row, json_row in zip(rows, answer["rows"], strict=True):
        assert int(row["total_tokens"]) == json_row["total_tokens"]
        assert row["cost_usd"] == ("" if json_row["cost_usd"] is None
                                   else str(json_row["cost_usd"]))
    assert refusals.text.splitlines()[0] == "day,reason,refusal_count"
    assert len(refusals.text.splitlines()) == 1 + len(REFUSALS)


async def test_only_admin_keys_read_it(seeded: LiveGateway) -> None:
    async with seeded.client(await seeded.api_key("alice")) as alice:
        for path in ("/api/admin/usage/report", "/api/admin/refusals"):
            refused = await alice.get(path, params=RANGE)
            assert refused.status_code == 403, path
            assert refused.json()["error"]["code"] == "forbidden"
    async with seeded.client() as anonymous:
        assert (await anonymous.get("/api/admin/usage/report")).status_code == 401


@pytest.mark.parametrize(("params", "words"), [
    ({"group_by": "team"}, "'group_by' must be one or two of day, user, model, stage"),
    ({"group_by": "day,model,user"}, "at most two"),
    ({"group_by": "user,user"}, "at most two different keys"),
    ({"limit": "0"}, "'limit' must be from 1 to 1000"),
    ({"limit": "5000"}, "'limit' must be from 1 to 1000"),
    ({"limit": "ten"}, "'limit' must be a whole number"),
    ({"offset": "-1"}, "'offset' must not be negative"),
    ({"format": "xml"}, "'format' must be 'json' or 'csv'"),
    ({"start": DAY3.isoformat(), "end": DAY1.isoformat()}, "'start' must not be after 'end'"),
    ({"start": "2026-13-01"}, "'start' must be a day as YYYY-MM-DD"),
    ({"start": "2020-01-01", "end": "2026-01-01"}, "at most 366 days"),
])
async def test_bad_queries_are_422_in_words(seeded: LiveGateway, params: dict[str, str],
                                            words: str) -> None:
    async with await _admin(seeded) as client:
        response = await client.get("/api/admin/usage/report", params=params)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_query"
    assert words in response.json()["error"]["message"]


async def test_a_refused_turn_reaches_the_table_when_the_gateway_stops(
    start_gateway: StartGateway, live_backend: str, demo_llm: DemoLlm,
) -> None:
    """A real refusal (a key whose daily budget is 0 tokens): counted in memory at once,
    written to refusal_counts by the shutdown's flush, where any process's dashboard reads it."""
    gateway = start_gateway(live_backend, upstream=demo_llm)
    async with gateway.client(await gateway.api_key("spender", tokens=0)) as client:
        thread = (await client.post("/api/threads", json={})).json()
        result = await post_turn(client, thread["id"], "hello")
    assert result.status_code == 429, result.raw
    assert result.body["error"]["code"] == "budget_exceeded"
    assert gateway.runtime.gate.refusals is not None
    assert gateway.runtime.gate.refusals.pending == 1
    gateway.stop()

    db = Database(gateway.database_url)
    try:
        async with db.transaction() as s:
            rows = (await s.execute(select(RefusalCount.reason, RefusalCount.refusal_count)
                                    )).all()
    finally:
        await db.dispose()
    assert [tuple(row) for row in rows] == [("budget_exceeded", 1)]
