"""The usage dashboard (/admin) in a real Chromium against a real gateway, on SQLite and on
PostgreSQL, at desktop and phone size: each chart draws, bar by bar, the figures the admin API
returns for seeded usage (read back from the drawn bars' pixels), the tables under the charts
hold the same rows, the CSV download is the API's, and the page keeps its strict CSP."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, expect

from app.store.db import Database
from tests.support.gateway import InProcessGateway, LiveGateway
from tests.usage import admin_seed
from tests.usage.admin_seed import DAY1, DAY3
from tests.web.page_helpers import BROWSER_TESTS, VIEWPORTS, Viewport, shot, sized_page

pytestmark = BROWSER_TESTS

RANGE = {"start": DAY1.isoformat(), "end": DAY3.isoformat()}
DAYS = [d.isoformat() for d in admin_seed.DAYS]

#: Every chart's bars as drawn: per dataset its label and data, and where each bar's far end
#: was drawn, read back as a figure on the chart's value axis; with the figure one pixel is
#: worth on that axis, and how many pixels of the canvas have ink.
DRAWN_BARS = """canvas => {
  const chart = Chart.getChart(canvas);
  const horizontal = chart.options.indexAxis === "y";
  const axis = horizontal ? chart.scales.x : chart.scales.y;
  const ctx = canvas.getContext("2d");
  const { data } = ctx.getImageData(0, 0, canvas.width, canvas.height);
  let inked = 0;
  for (let i = 3; i < data.length; i += 4) if (data[i] > 0) inked++;
  return {
    labels: chart.data.labels, inked, stacked: Boolean(axis.options.stacked),
    pixel: Math.abs(axis.getValueForPixel(1) - axis.getValueForPixel(0)),
    datasets: chart.data.datasets.map((set, i) => ({
      label: set.label, data: set.data,
      ends: chart.getDatasetMeta(i).data.map(
        (bar) => axis.getValueForPixel(horizontal ? bar.x : bar.y)),
    })),
  };
}"""


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


async def _api(gateway: LiveGateway, key: str) -> dict[str, Any]:
    """What the admin API answers for the dashboard's range."""
    async with httpx.AsyncClient(base_url=gateway.url,
                                 headers={"Authorization": f"Bearer {key}"}) as client:
        async def get(path: str, **params: Any) -> Any:
            response = await client.get(path, params={**RANGE, **params})
            assert response.status_code == 200, response.text
            return response.json()

        top = await get("/api/admin/usage/report", group_by="user", limit=10)
        drawn_users = [row["user_id"] for row in top["rows"][:6]]
        return {
            "model": await get("/api/admin/usage/report", group_by="day,model", limit=1000),
            "day": await get("/api/admin/usage/report", group_by="day"),
            "user": await get("/api/admin/usage/report", group_by="day,user", limit=1000,
                              user_id=drawn_users),
            "top": top,
            "stage": await get("/api/admin/usage/report", group_by="stage"),
            "refusals": await get("/api/admin/refusals"),
            "csv": (await client.get("/api/admin/usage/report", params={
                **RANGE, "group_by": "day,model", "format": "csv"})).text,
        }


async def _drawn(page: Page, test_id: str) -> dict[str, Any]:
    drawn: dict[str, Any] = await page.locator(f'canvas[data-testid="{test_id}"]').evaluate(
        DRAWN_BARS)
    assert drawn["inked"] > 500, f"{test_id}: the canvas is blank"
    return drawn


def _per_day(rows: list[dict[str, Any]], series: str, field: str) -> dict[str, list[float]]:
    """The API's rows as the chart's series: one value per day of the range, 0 where none."""
    out: dict[str, list[float]] = {}
    for row in rows:
        out.setdefault(row[series], [0.0] * len(DAYS))[DAYS.index(row["day"])] += (
            row[field] or 0)
    return out


def _assert_bars(drawn: dict[str, Any], labels: list[str], want: dict[str, list[float]]
                 ) -> None:
    """The chart holds `want` (series -> one figure per label) and draws each bar's end where
    that figure (stacked: the sum of the series up to it) is on its axis, to the pixel."""
    assert drawn["labels"] == labels
    got = {d["label"]: d for d in drawn["datasets"]}
    assert set(got) == set(want)
    below = [0.0] * len(labels)
    for dataset in drawn["datasets"]:
        values = want[dataset["label"]]
        assert dataset["data"] == pytest.approx(values), dataset["label"]
        ends = [b + v for b, v in zip(below, values, strict=True)] if drawn["stacked"] \
            else values
        assert dataset["ends"] == pytest.approx(ends, abs=drawn["pixel"]), dataset["label"]
        if drawn["stacked"]:
            below = ends


async def _table_rows(page: Page, section: str) -> list[list[str]]:
    rows: list[list[str]] = await page.locator(
        f'[data-testid="table-{section}"] tbody tr').evaluate_all(
        "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    return rows


async def _open(page: Page, gateway: LiveGateway, key: str) -> None:
    """The dashboard as an admin opens it the first time: no key yet, told so, key typed in."""
    await page.goto(f"{gateway.url}/admin?start={RANGE['start']}&end={RANGE['end']}")
    await expect(page.get_by_test_id("notice")).to_contain_text("needs an admin API key")
    await expect(page.get_by_test_id("api-key")).to_be_visible()  # opened for the key
    await page.get_by_test_id("api-key").fill(key)
    await page.get_by_test_id("apply").click()
    await expect(page.get_by_test_id("dashboard")).to_have_attribute(
        "data-state", "ready", timeout=20_000)


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=lambda v: v.name)
async def test_the_charts_draw_what_the_api_returns(
    browser: Browser, seeded: InProcessGateway, viewport: Viewport, tmp_path: Path,
) -> None:
    key = await seeded.api_key("root", admin=True)
    api = await _api(seeded, key)
    async with sized_page(browser, viewport) as page:
        csp_violations: list[str] = []
        page.on("console", lambda m: csp_violations.append(m.text)
                if "Content Security Policy" in m.text else None)
        await _open(page, seeded, key)

        totals = api["model"]["totals"]
        assert await page.get_by_test_id("total-tokens").inner_text() == \
            f"{totals['total_tokens']:,}"
        assert await page.get_by_test_id("total-refusals").inner_text() == \
            str(api["refusals"]["total"])
        assert await page.get_by_test_id("total-cost").inner_text() == f"{totals['cost_usd']:.6f}"
        assert await page.get_by_test_id("total-unpriced").inner_text() == \
            "and 1 call without a price"  # bob's local model

        by_model = api["model"]["rows"]
        _assert_bars(await _drawn(page, "chart-model-tokens"), DAYS,
                     _per_day(by_model, "model", "total_tokens"))
        _assert_bars(await _drawn(page, "chart-model-cost"), DAYS,
                     _per_day(by_model, "model", "cost_usd"))
        # six users one by one, the seventh (dave, the fewest tokens) as "other users":
        # each day's total of every user less the six users' figures
        per_user = _per_day(api["user"]["rows"], "user_id", "total_tokens")
        assert len(per_user) == 6 and "dave" not in per_user
        per_user["other users"] = [
            next(r["total_tokens"] for r in api["day"]["rows"] if r["day"] == day)
            - sum(series[n] for series in per_user.values()) for n, day in enumerate(DAYS)]
        assert per_user["other users"] == [0, 12, 0]
        _assert_bars(await _drawn(page, "chart-user-tokens"), DAYS, per_user)
        top = api["top"]["rows"]
        _assert_bars(await _drawn(page, "chart-top-users"), [r["user_id"] for r in top],
                     {"tokens": [r["total_tokens"] for r in top]})
        stages = api["stage"]["rows"]
        _assert_bars(await _drawn(page, "chart-stage-calls"), [r["stage"] for r in stages],
                     {"calls": [r["llm_call_count"] for r in stages]})
        _assert_bars(await _drawn(page, "chart-refusals"), DAYS,
                     _per_day(api["refusals"]["rows"], "reason", "refusal_count"))

        # the tables under the charts: the API's rows, as words and figures
        model_rows = await _table_rows(page, "by-model")
        assert [(r[0], r[1], r[2]) for r in model_rows] == [
            (r["day"], r["model"], f"{r['total_tokens']:,}") for r in by_model]
        headers = await page.locator('[data-testid="table-by-model"] thead th').all_inner_texts()
        unpriced = next(r for r in model_rows if r[1] == "local-llama")
        assert unpriced[headers.index("Cost (USD)")] == "unknown"  # unknown, not 0
        assert [r[0] for r in await _table_rows(page, "by-stage")] == [
            r["stage"] for r in stages]
        assert len(await _table_rows(page, "refusals")) == len(api["refusals"]["rows"])

        async with page.expect_download() as download_info:
            await page.get_by_test_id("csv-by-model").click()
        download = await download_info.value
        assert download.suggested_filename == f"usage-day-model-{DAY1}-{DAY3}.csv"
        assert Path(await download.path()).read_text() == api["csv"]

        # nothing wider than the screen: the tables scroll inside their box
        width = await page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= viewport.width
        folder = Path(os.environ.get("ADMIN_SHOTS_DIR", tmp_path))
        name = f"admin-{seeded.runtime.db.backend}-{viewport.name}"
        await shot(page, folder, name)
        await page.evaluate("() => window.scrollTo(0, 0)")
        await page.screenshot(path=str(folder / f"{name}-first-screen.png"))
        assert csp_violations == []


async def test_a_key_that_is_not_an_admins_is_told_so(
    page: Page, seeded: InProcessGateway
) -> None:
    key = await seeded.api_key("alice")
    await page.goto(f"{seeded.url}/admin")
    await expect(page.get_by_test_id("dashboard")).to_have_attribute("data-state", "failed")
    await page.get_by_test_id("api-key").fill(key)
    await page.get_by_test_id("apply").click()
    await expect(page.get_by_test_id("notice")).to_have_text(
        "This key is not an admin key: the dashboard needs one.")
    await expect(page.get_by_test_id("dashboard")).to_have_attribute("data-state", "failed")


async def test_the_vendored_chart_library_is_the_one_recorded() -> None:
    """vendor/VERSIONS.md's sha256 sums match the files served."""
    import hashlib

    vendor = Path(__file__).resolve().parents[2] / "app" / "web" / "static" / "vendor"
    recorded = [line.split() for line in (vendor / "VERSIONS.md").read_text().splitlines()
                if len(line.split()) == 2 and len(line.split()[0]) == 64]
    assert "chart.umd.js" in {name for _, name in recorded}
    for digest, name in recorded:
        assert hashlib.sha256((vendor / name).read_bytes()).hexdigest() == digest, name


async def test_a_range_without_usage_says_so(page: Page, seeded: InProcessGateway) -> None:
    key = await seeded.api_key("root", admin=True)
    await page.goto(f"{seeded.url}/admin?start=2025-01-01&end=2025-01-31")
    await page.get_by_test_id("api-key").fill(key)
    await page.get_by_test_id("apply").click()
    await expect(page.get_by_test_id("dashboard")).to_have_attribute("data-state", "ready")
    await expect(page.get_by_test_id("total-tokens")).to_have_text("0")
    await expect(page.get_by_test_id("total-cost")).to_have_text("–")  # no cost known
    for section in ("by-model", "by-user", "top-users", "by-stage"):
        assert await _table_rows(page, section) == [["No usage in this range."]], section
    assert await _table_rows(page, "refusals") == [["No refused requests in this range."]]
    drawn = await page.locator('canvas[data-testid="chart-model-tokens"]').evaluate(
        "canvas => Chart.getChart(canvas).data.labels.length")
    assert drawn == 31  # every day of the range, each with no bar


async def test_the_page_is_served_under_the_chat_pages_policy(seeded: InProcessGateway) -> None:
    async with seeded.client() as client:
        chat, admin = await client.get("/"), await client.get("/admin")
        assets = [await client.get(path) for path in (
            "/static/admin/admin.js", "/static/admin/admin.css", "/static/vendor/chart.umd.js")]
    assert admin.status_code == 200 and "Chatgate usage" in admin.text
    assert admin.headers["content-security-policy"] == chat.headers["content-security-policy"]
    assert "script-src 'self';" in admin.headers["content-security-policy"]
    assert [a.status_code for a in assets] == [200, 200, 200]
