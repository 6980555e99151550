"""`scripts/serve`'s start (and the Docker entry point's, `--prepare-only`) asks the
PostgreSQL server how many connections it allows: workers whose pools cannot fit are refused
with one sentence naming the numbers and the fix, and the pools derived from the worker
count fit."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support.databases import drop_database, make_fresh_database_url, require_postgres
from tests.support.gateway import ROOT, clean_env, free_port

pytestmark = pytest.mark.postgres


@pytest.fixture
def postgres_url() -> Iterator[str]:
    require_postgres()
    url = make_fresh_database_url("postgresql")
    yield url
    drop_database(url)


def prepare(url: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.gateway.serve", "--prepare-only", "--port", str(free_port())],
        cwd=ROOT, env=clean_env({"CHATGATE_DATABASE_URL": url, "CHATGATE_LOG_FORMAT": "json",
                                 **env}),
        capture_output=True, text=True, timeout=120)


def test_workers_whose_pools_exceed_max_connections_are_refused_in_one_sentence(
    postgres_url: str
) -> None:
    done = prepare(postgres_url, CHATGATE_WORKERS="8", CHATGATE_DATABASE_POOL_SIZE="20",
                   CHATGATE_DATABASE_MAX_OVERFLOW="10")
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert line.startswith("error: 8 worker(s) x (20 pooled + 10 overflow + 1 listening) = "
                           "248 PostgreSQL connections, but the server allows "), line
    assert ("set CHATGATE_DATABASE_MAX_OVERFLOW to 0 and CHATGATE_DATABASE_POOL_SIZE to at most 11"
            in line), line
    assert "Traceback" not in done.stderr


def test_pools_derived_from_the_worker_count_fit(postgres_url: str) -> None:
    done = prepare(postgres_url, CHATGATE_WORKERS="8")
    assert done.returncode == 0, done.stderr
    assert '"database_connections_fit"' in done.stdout + done.stderr
