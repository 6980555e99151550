"""The "two commands" promise: `scripts/serve` alone gives a working gateway. With no upstream
configured it migrates the database, starts the demo model server and says so, serves the page
and answers a turn with clean text; SIGTERM stops it and its demo child."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from sqlalchemy import text

from app.store.db import Database
from tests.e2e.helpers import HEADER, messages, new_thread
from tests.scripts.conftest import SERVE
from tests.support.databases import drop_database, make_fresh_database_url, require_postgres
from tests.support.gateway import clean_env, free_port, post_turn, wait_for_http
from tests.support.waits import until, until_sync

STOP_TIMEOUT_S = 15.0


def log_lines(log_path: Path) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            item = json.loads(line)
            if isinstance(item, dict):
                lines.append(item)
    return lines


def accepts_connections(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_until_closed(port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while accepts_connections(port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@contextlib.contextmanager
def serving(tmp_path: Path, env: dict[str, str]) -> Iterator[
    tuple[subprocess.Popen[bytes], str, Path]
]:
    """`scripts/serve --port P --demo-port D` with no CHATGATE_UPSTREAM_BASE_URL and `env`;
    yields (process, url, log path). Whatever is left of it (its process group: the serve
    process, its workers and the demo child) is killed afterwards."""
    port, demo_port = free_port(), free_port()
    log_path = tmp_path / "serve.log"
    env = clean_env({
        **env,
        "CHATGATE_DEMO_DELAY_MS": "2",  # the demo child's pace; the default 15 ms is slow
    })
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [str(SERVE), "--port", str(port), "--demo-port", str(demo_port)], cwd=tmp_path,
            env=env,
            stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        yield process, f"http://127.0.0.1:{port}", log_path
    finally:
        if process.poll() is None:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=STOP_TIMEOUT_S)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the group we made
        process.wait(timeout=STOP_TIMEOUT_S)


@pytest.fixture
def serve_process(installed_venv: None, tmp_path: Path) -> Iterator[
    tuple[subprocess.Popen[bytes], str, Path, Path]
]:
    """`scripts/serve` on a SQLite file in tmp_path; yields (process, url, log path, database
    path)."""
    database = tmp_path / "var" / "chatgate.db"
    with serving(tmp_path, {"CHATGATE_DATABASE_URL": f"sqlite+aiosqlite:///{database}"}
                 ) as (process, url, log_path):
        yield process, url, log_path, database


async def test_serve_alone_gives_a_working_gateway_and_stops_cleanly(
    serve_process: tuple[subprocess.Popen[bytes], str, Path, Path],
) -> None:
    process, url, log_path, database = serve_process
    wait_for_http(url + "/readyz", process, log_path)
    log_text = log_path.read_text(errors="replace")
    assert "bootstrap: installing" not in log_text
    assert database.is_file(), "the database was not migrated where it was configured"

    lines = log_lines(log_path)
    started = [line for line in lines if line.get("event") == "demo_upstream_started"]
    assert len(started) == 1, log_text[-3000:]
    demo_url = started[0]["upstream"]
    demo_port = urlsplit(demo_url).port
    assert demo_port is not None and demo_url.startswith("http://127.0.0.1:")
    assert str(demo_port) in " ".join(str(a) for a in process.args)  # --demo-port was used
    listening = next(line for line in lines if line.get("event") == "gateway_listening")
    assert listening["upstream"] == demo_url
    assert listening["auth_mode"] == "off"  # loopback, mode not set: no key needed

    async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
        page = await client.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "<title>Chatgate</title>" in page.text

        thread_id = await new_thread(client)
        result = await post_turn(client, thread_id, "Hello [seed-bug]")
        assert result.status_code == 200, result.raw
        assert result.one("message_end")["status"] == "complete"
        assert result.text.startswith("Aha, chápu.")
        assert not HEADER.search(result.text) and "-->" not in result.text
        stored = await messages(client, thread_id)
        assert stored[-1]["content"] == result.text
        assert (await client.get("/readyz")).status_code == 200
    # The console shows the gateway's lines: no access log of the demo child, no alembic
    # chatter from the /readyz probes.
    log_text = log_path.read_text(errors="replace")
    assert "POST /v1/chat/completions" not in log_text, log_text[-2000:]
    assert "Context impl" not in log_text and "Will assume" not in log_text

    gateway_port = urlsplit(url).port
    assert gateway_port is not None
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=STOP_TIMEOUT_S)
    assert wait_until_closed(gateway_port, 5.0)
    assert wait_until_closed(demo_port, 5.0), "the demo model server outlived scripts/serve"


def test_serve_on_an_unreachable_database_says_so_in_one_sentence(
    installed_venv: None, tmp_path: Path
) -> None:
    closed = free_port()  # nothing listens there
    env = clean_env({"CHATGATE_DATABASE_URL":
                      f"postgresql+asyncpg://postgres@127.0.0.1:{closed}/chatgate"})
    done = subprocess.run([str(SERVE), "--port", str(free_port())], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: cannot reach the database postgresql+asyncpg://postgres@127.0.0.1:{closed}/"
        f"chatgate: [Errno 111] Connect call failed ('127.0.0.1', {closed})"]
    assert "Traceback" not in done.stdout + done.stderr


def test_auth_off_beyond_loopback_is_allowed_but_warned() -> None:
    from app.config.settings import Settings
    from app.gateway.serve import effective_settings, warn_if_open_to_the_network

    explicit_off = Settings(auth_mode="off")
    assert warn_if_open_to_the_network(explicit_off, "0.0.0.0")
    assert not warn_if_open_to_the_network(explicit_off, "127.0.0.1")
    # Without an explicit mode, a network address gets keys: nothing to warn about.
    assert effective_settings(Settings(), "0.0.0.0", None).auth_mode == "keys"
    assert not warn_if_open_to_the_network(effective_settings(Settings(), "0.0.0.0", None),
                                           "0.0.0.0")


def test_several_workers_need_postgresql() -> None:
    from app.gateway.serve import check_workers
    from app.gateway.startup import ConfigError

    check_workers(1, "sqlite+aiosqlite:///./var/chatgate.db")
    check_workers(4, "postgresql+asyncpg://postgres@127.0.0.1/chatgate")
    with pytest.raises(ConfigError, match="CHATGATE_WORKERS=2 needs PostgreSQL"):
        check_workers(2, "sqlite+aiosqlite:///./var/chatgate.db")


async def test_serve_with_two_workers_on_postgresql_answers_and_stops_them(
    installed_venv: None, tmp_path: Path
) -> None:
    """CHATGATE_WORKERS=2: two worker processes (each registers itself), each on a listening
    socket of its own (app.gateway.workers), answer turns; SIGTERM stops every one."""
    require_postgres()
    database_url = make_fresh_database_url("postgresql", migrated=False)
    database = Database(database_url)
    try:
        with serving(tmp_path, {"CHATGATE_DATABASE_URL": database_url,
                                "CHATGATE_WORKERS": "2"}) as (process, url, log_path):
            wait_for_http(url + "/readyz", process, log_path)
            await until(lambda: registered(database, 2), what="both workers registered")
            async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
                for word in ("Hello", "Again"):
                    result = await post_turn(client, await new_thread(client), word)
                    assert result.one("message_end")["status"] == "complete", result.raw
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=STOP_TIMEOUT_S)
            until_sync(lambda: not group_alive(process.pid), what="every worker stopped")
            await until(lambda: registered(database, 0), what="both workers unregistered")
    finally:
        await database.dispose()
        drop_database(database_url)


async def registered(database: Database, count: int) -> bool:
    async with database.transaction(read_only=True) as s:
        return await s.scalar(text("SELECT count(*) FROM gateway_processes")) == count


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True
