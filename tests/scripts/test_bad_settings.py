"""Every setting an operator can get wrong ends `scripts/serve` and an operator script the
same way (and the container's entry point): one sentence on stderr naming the setting and
what it must be, no traceback, exit 2, and nothing said about listening. Each is a real
process started as the operator starts it (the interpreter's exit status and stderr, the
bootstrap's wrapper for serve); the cases run a few at a time, each refused within seconds."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests.scripts.conftest import SERVE
from tests.support.databases import PG_ADMIN_URL, require_postgres
from tests.support.gateway import ROOT, clean_env, free_port

#: At most this many cases run at once (the machine is shared); each must end within RUN_S.
PARALLEL = 4
RUN_S = 60.0
MISSING_DATABASE = f"chatgate_missing_{uuid.uuid4().hex[:12]}"
_admin = make_url(PG_ADMIN_URL)
MISSING_URL = _admin.set(drivername="postgresql+asyncpg", database=MISSING_DATABASE
                         ).render_as_string(hide_password=False)
_createdb = " ".join(
    ["createdb"] + [f"-h {_admin.host}"] * bool(_admin.host)
    + [f"-p {_admin.port}"] * bool(_admin.port) + [f"-U {_admin.username}"] * bool(_admin.username)
    + [MISSING_DATABASE])
DATABASE_URLS = ("a PostgreSQL or SQLite URL (postgresql+asyncpg://user@host:5432/name or "
                 "sqlite+aiosqlite:///path/to/file.db)")


@dataclass(frozen=True)
class Case:
    env: dict[str, str]
    sentence: str


CASES: dict[str, Case] = {
    "nonsense database url": Case(
        {"CHATGATE_DATABASE_URL": "nonsense"},
        f"CHATGATE_DATABASE_URL must be {DATABASE_URLS}, not 'nonsense'"),
    "unsupported database": Case(
        {"CHATGATE_DATABASE_URL": "mysql://root:hunter2@127.0.0.1/chatgate"},
        f"CHATGATE_DATABASE_URL must be {DATABASE_URLS}, "
        "not 'mysql://root:***@127.0.0.1/chatgate'"),
    "unknown driver": Case(
        {"CHATGATE_DATABASE_URL": "postgresql+psycopg2://postgres@127.0.0.1/chatgate"},
        "CHATGATE_DATABASE_URL must be a PostgreSQL URL with the asyncpg driver "
        "(postgresql+asyncpg://...), not 'postgresql+psycopg2://postgres@127.0.0.1/chatgate'"),
    "missing database": Case(
        {"CHATGATE_DATABASE_URL": MISSING_URL},
        f"the database {make_url(MISSING_URL).render_as_string(hide_password=True)} does "
        f"not exist: create it with `{_createdb}`; scripts/serve then creates its tables"),
    "upstream not a url": Case(
        {"CHATGATE_UPSTREAM_BASE_URL": "not a url"},
        "CHATGATE_UPSTREAM_BASE_URL must be an http(s) URL such as https://api.openai.com/v1, "
        "not 'not a url'"),
    "upstream url with credentials": Case(
        {"CHATGATE_UPSTREAM_BASE_URL": "https://me:hunter2@api.example.com/v1"},
        "CHATGATE_UPSTREAM_BASE_URL must be an http(s) URL without a user name and password "
        "(the key goes in CHATGATE_UPSTREAM_API_KEY), not 'https://***@api.example.com/v1'"),
    "auth mode": Case(
        {"CHATGATE_AUTH_MODE": "foo"}, "CHATGATE_AUTH_MODE must be keys or off, not 'foo'"),
    "auth mode misspelt": Case(
        {"CHATGATE_AUTH_MDOE": "keys"},
        "CHATGATE_AUTH_MDOE (in the environment) is not a setting: did you mean "
        "CHATGATE_AUTH_MODE? It decides who gets in, so the gateway does not start with it "
        "misspelt"),
    "temperature": Case(
        {"CHATGATE_UPSTREAM_TEMPERATURE": "hot"},
        "CHATGATE_UPSTREAM_TEMPERATURE must be a number, not 'hot'"),
    "log level": Case(
        {"CHATGATE_LOG_LEVEL": "LOUD"},
        "CHATGATE_LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL, not 'LOUD'"),
    "tool format": Case(
        {"CHATGATE_TOOL_FORMAT": "qwen"},
        "CHATGATE_TOOL_FORMAT must be none or hermes, not 'qwen'"),
    "tool tag": Case(
        {"CHATGATE_TOOL_TAG": "<tool_call>"},
        "CHATGATE_TOOL_TAG must be a tag name of letters, digits, '-' and '_' (such as "
        "tool_call), not '<tool_call>'"),
    "missing price file": Case(
        {"CHATGATE_PRICE_FILE": "/nonexistent.json"},
        "CHATGATE_PRICE_FILE must be a readable JSON price file, not '/nonexistent.json': "
        "no such file"),
}
PORT_IN_USE = "port in use"


def _run(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`command` in a process group of its own: a case that was not refused (a gateway and
    its demo child that started after all) is killed whole at RUN_S, and fails."""
    process = subprocess.Popen(command, cwd=cwd, env=clean_env(env), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=RUN_S)
    except subprocess.TimeoutExpired:
        stdout, stderr = "", f"still running after {RUN_S} s"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@contextlib.contextmanager
def port_taken() -> Iterator[int]:
    """A loopback port another process (this one) listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.fixture(scope="module")
def outcomes(installed_venv: None, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[dict[tuple[str, str], subprocess.CompletedProcess[str]]]:
    """Every case against `scripts/serve` and `keys.py list`, PARALLEL at a time."""
    cwd = tmp_path_factory.mktemp("bad-settings")  # the default SQLite file lands here
    with port_taken() as taken, ThreadPoolExecutor(PARALLEL) as pool:
        jobs = {}
        for name, case in CASES.items():
            jobs["serve", name] = pool.submit(
                _run, [str(SERVE), "--port", str(free_port())], case.env, cwd)
            jobs["keys", name] = pool.submit(
                _run, [sys.executable, str(ROOT / "scripts" / "keys.py"), "list"], case.env, cwd)
        jobs["serve", PORT_IN_USE] = pool.submit(
            _run, [str(SERVE), "--port", str(taken)], {}, cwd)
        jobs["keys", "--database-url"] = pool.submit(
            _run, [sys.executable, str(ROOT / "scripts" / "keys.py"), "list", "--database-url",
                   "mysql://root:hunter2@127.0.0.1/chatgate"], {}, cwd)
        jobs["container", "auth mode"] = pool.submit(
            _run, ["sh", str(ROOT / "scripts" / "docker-entrypoint.sh")],
            {**CASES["auth mode"].env, "CHATGATE_PORT": str(free_port()),
             "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}, cwd)
        yield {key: job.result() for key, job in jobs.items()}


def assert_one_sentence(done: subprocess.CompletedProcess[str], sentence: str) -> None:
    everything = done.stdout + done.stderr
    assert done.stderr.splitlines() == [f"error: {sentence}"], everything[-3000:]
    assert "Traceback" not in everything
    assert "gateway_listening" not in everything and "demo_upstream_started" not in everything
    assert done.returncode == 2, everything[-3000:]


def _needs(name: str) -> None:
    if name == "missing database":
        require_postgres()


@pytest.mark.parametrize("name", list(CASES))
def test_serve_refuses_a_bad_setting_in_one_sentence(
    outcomes: dict[tuple[str, str], subprocess.CompletedProcess[str]], name: str,
) -> None:
    _needs(name)
    assert_one_sentence(outcomes["serve", name], CASES[name].sentence)


@pytest.mark.parametrize("name", list(CASES))
def test_an_operator_script_refuses_a_bad_setting_in_one_sentence(
    outcomes: dict[tuple[str, str], subprocess.CompletedProcess[str]], name: str,
) -> None:
    _needs(name)
    assert_one_sentence(outcomes["keys", name], CASES[name].sentence)


def test_serve_refuses_a_port_in_use_before_saying_it_listens(
    outcomes: dict[tuple[str, str], subprocess.CompletedProcess[str]],
) -> None:
    done = outcomes["serve", PORT_IN_USE]
    port = done.args[-1]
    assert_one_sentence(done, f"--port {port} on 127.0.0.1 cannot be used: another process "
                              "listens there; stop it or choose another port")


def test_an_operator_scripts_database_url_is_held_to_the_settings_rule(
    outcomes: dict[tuple[str, str], subprocess.CompletedProcess[str]],
) -> None:
    assert_one_sentence(outcomes["keys", "--database-url"],
                        f"--database-url must be {DATABASE_URLS}, "
                        "not 'mysql://root:***@127.0.0.1/chatgate'")


def test_the_container_refuses_a_bad_setting_before_it_starts_uvicorn(
    outcomes: dict[tuple[str, str], subprocess.CompletedProcess[str]],
) -> None:
    assert_one_sentence(outcomes["container", "auth mode"], CASES["auth mode"].sentence)


def test_prepare_only_migrates_and_exits_without_listening(tmp_path: Path) -> None:
    """What the container's entry point runs before uvicorn: the checks and the migration,
    then exit 0, nothing left listening."""
    database = tmp_path / "var" / "chatgate.db"
    done = _run([sys.executable, "-m", "app.gateway.serve", "--prepare-only",
                 "--port", str(free_port())],
                {"CHATGATE_DATABASE_URL": f"sqlite+aiosqlite:///{database}",
                 "PYTHONPATH": str(ROOT)}, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == "" and database.is_file()
    assert "database_migrated" in done.stdout and "gateway_listening" not in done.stdout
