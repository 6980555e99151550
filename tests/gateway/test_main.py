"""The application factory refuses a configuration that would send users' threads somewhere
nobody chose; how often the stale-row sweep repeats; the heap trim runs only where it can;
the SQLite log is merged in the background."""

from __future__ import annotations

import subprocess
import sys

from app.gateway.main import sweep_interval_s
from app.process.heap import can_return_free_memory
from tests.support.gateway import ROOT, DemoLlm, clean_env, same_loop_gateway


def test_no_upstream_url_refuses_to_start_instead_of_calling_openai() -> None:
    env = clean_env({"CHATGATE_DATABASE_URL": "sqlite+aiosqlite:////nonexistent/not-used.db"})
    env.pop("OPENAI_BASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "uvicorn", "app.gateway.main:create_app", "--factory",
         "--host", "127.0.0.1", "--port", "0"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert '"event": "upstream_not_configured"' in output
    assert "CHATGATE_UPSTREAM_BASE_URL is not set" in output


def test_the_stale_sweep_repeats_every_quarter_age_within_5_to_60_seconds() -> None:
    """Often enough that a stale row is freed soon after it turns stale, never more often
    than every 5 s nor less often than every minute."""
    assert sweep_interval_s(1.0) == 5.0
    assert sweep_interval_s(100.0) == 25.0
    assert sweep_interval_s(600.0) == 60.0  # the default age
    assert sweep_interval_s(3600.0) == 60.0


async def test_the_heap_trim_runs_where_the_c_library_can_trim(
    database_url: str, demo_llm: DemoLlm
) -> None:
    """glibc (this machine): a background task returns freed memory every 10 s; a C library
    without malloc_trim gets no task that would wake for nothing."""
    async with same_loop_gateway(database_url, demo_llm) as gw:
        running = "heap_trim" in gw.runtime.background.names
    assert running == can_return_free_memory()
    assert running  # this suite runs on glibc


async def test_a_sqlite_gateway_merges_its_log_in_the_background(
    database_url: str, demo_llm: DemoLlm
) -> None:
    """Its commits merge none (app.store.db.Database.merge_sqlite_log); on PostgreSQL there is
    no log of SQLite's to merge."""
    async with same_loop_gateway(database_url, demo_llm) as gw:
        running = "sqlite_log_merge" in gw.runtime.background.names
        sqlite = gw.runtime.db.backend == "sqlite"
        assert running == sqlite
        if not sqlite:
            assert await gw.runtime.db.merge_sqlite_log() == (0, 0)
