"""GET /metrics scraped over real HTTP from gateway subprocesses after real turns against the
demo model: clean answers, one with filter warnings, two failed upstream calls; and with two
uvicorn workers in prometheus multiprocess mode, where any worker must report all of them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.helpers import keyed_client, new_thread
from tests.support.databases import drop_database, make_fresh_database_url
from tests.support.gateway import (
    TEST_GATEWAY_ENV,
    DemoLlm,
    StartGateway,
    TurnResult,
    free_port,
    post_turn,
    spawn_uvicorn,
    stop_process,
    wait_for_http,
)
from tests.support.http import LOOPBACK_TLS

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    # a new connection per scrape, so that with several workers any of them may answer
    response = httpx.get(url + "/metrics", timeout=10, headers={"Connection": "close"},
                         verify=LOOPBACK_TLS)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum over every series of `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, lbls), v in samples.items() if n == name and wanted <= lbls)


async def test_metrics_count_turns_warnings_tokens_and_upstream_errors(
    demo_llm: DemoLlm, start_gateway: StartGateway
) -> None:
    gateway = start_gateway("sqlite", upstream=demo_llm,
                            env={"CHATGATE_FIRST_TOKEN_TIMEOUT_S": "1.0"})
    results: list[TurnResult] = []
    async with await keyed_client(gateway, "watcher") as client:
        for content in ("Hello one", "Hello two", "Hello [seed-bug]",
                        "[error-before] hi", "[slow-first] too slow for the 1 s timeout"):
            results.append(await post_turn(client, await new_thread(client), content))
    assert [r.names[-1] for r in results] == ["message_end"] * 3 + ["error"] * 2
    samples = scrape(gateway.url)  # no API key: /metrics is open like /healthz

    assert value(samples, "chatgate_turns_total", status="complete") == 3
    assert value(samples, "chatgate_turns_total", status="failed") == 2
    assert total(samples, "chatgate_turns_total") == 5
    assert value(samples, "chatgate_active_streams") == 0
    warnings = {dict(lbls)["kind"]: v for (n, lbls), v in samples.items()
                if n == "chatgate_filter_warnings_total"}
    assert warnings == {"context_echo": 1, "metadata_at_start": 1, "unclosed_block": 1}
    errors = {(dict(lbls)["code"], dict(lbls)["http_status"]): v
              for (n, lbls), v in samples.items() if n == "chatgate_upstream_errors_total"}
    assert errors == {("upstream_error", "500"): 1, ("upstream_timeout", "none"): 1}
    usages = [r.one("usage") for r in results]
    assert total(samples, "chatgate_tokens_total", kind="prompt") == sum(
        u["prompt_tokens"] for u in usages)
    assert total(samples, "chatgate_tokens_total", kind="completion") == sum(
        u["completion_tokens"] for u in usages)
    assert value(samples, "chatgate_tokens_total", model="demo-1", kind="completion") > 0
    # a first token only for the three answers that streamed
    assert value(samples, "chatgate_time_to_first_token_seconds_count") == 3
    assert value(samples, "chatgate_gateway_overhead_seconds_count") == 5
    overhead = value(samples, "chatgate_gateway_overhead_seconds_sum")
    assert 0 < overhead < 5 * 1.0  # the timeout turn alone waits 1 s on the upstream


@pytest.fixture
def two_worker_gateway(demo_llm: DemoLlm, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """Two workers (`python -m app.gateway.workers --workers 2`) with PROMETHEUS_MULTIPROC_DIR,
    auth off, on a fresh SQLite."""
    database_url = make_fresh_database_url("sqlite")
    multiproc_dir = tmp_path / "prom"
    multiproc_dir.mkdir()
    port = free_port()
    log_path = tmp_path / "gateway.log"
    env = {**TEST_GATEWAY_ENV, "CHATGATE_AUTH_MODE": "off",
           "CHATGATE_DATABASE_URL": database_url,
           "CHATGATE_UPSTREAM_BASE_URL": demo_llm.base_url,
           "PROMETHEUS_MULTIPROC_DIR": str(multiproc_dir)}
    process = spawn_uvicorn(port, env, log_path, "--workers", "2")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(url + "/healthz", process, log_path)
        yield url, multiproc_dir
    finally:
        stop_process(process)
        drop_database(database_url)


def worker_pids(multiproc_dir: Path) -> set[str]:
    return {path.stem.rsplit("_", 1)[-1] for path in multiproc_dir.glob("counter_*.db")}


async def test_multiprocess_mode_reports_every_workers_turns_from_any_worker(
    two_worker_gateway: tuple[str, Path],
) -> None:
    url, multiproc_dir = two_worker_gateway
    turns = 0
    # No keep-alive: each request is a new connection, accepted by either worker.
    async with httpx.AsyncClient(base_url=url, timeout=30,
                                 limits=httpx.Limits(max_keepalive_connections=0)) as client:
        while turns < 4 or (len(worker_pids(multiproc_dir)) < 2 and turns < 40):
            result = await post_turn(client, await new_thread(client), f"Hello {turns}")
            assert result.one("message_end")["status"] == "complete"
            turns += 1
    assert len(worker_pids(multiproc_dir)) == 2, "every turn landed on the same worker"
    for _ in range(6):
        samples = scrape(url)
        assert value(samples, "chatgate_turns_total", status="complete") == turns
        assert value(samples, "chatgate_active_streams") == 0
