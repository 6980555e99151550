"""Gateway processes: forked from a server that has already imported the gateway, or spawned
(`python -m app.gateway.workers`, the container's command) when a setting is read at
import time; and what tests use of any process
(a cleaned environment, waiting for it to answer, stopping it).

A gateway subprocess spends most of its start importing (about 1.3 s: openai's types,
SQLAlchemy, Starlette) before uvicorn serves. A multiprocessing fork server imports app.gateway.main
and uvicorn once per test process, and freezes what it imported (tests/support/fork_preload.py);
each gateway is then a fork of that server: a process of its own (own pid, signals, SIGKILL,
exit status, log file), the way `python -m uvicorn app.gateway.main:create_app --factory` runs
it, started in a fraction of the time. Nothing the app reads is read at import time except what
`spawn_needed` names: those gateways are spawned.

`ForkedProcess` answers what the tests ask of a subprocess.Popen: pid, poll, returncode,
wait, terminate, kill.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Protocol

import httpx

from tests.support.http import LOOPBACK_TLS

ROOT = Path(__file__).resolve().parents[3]
START_TIMEOUT_S = 30.0

#: Settings read when a module is imported, not when the app is made: a fork of a server
#: that imported without them would not have them.
IMPORT_TIME_ENV = ("PROMETHEUS_MULTIPROC_DIR",)

_context: ForkServerContext | None = None


def spawn_needed(env: Mapping[str, str]) -> bool:
    return any(name in env for name in IMPORT_TIME_ENV)


def _fork_server() -> ForkServerContext:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(["app.gateway.main", "uvicorn",
                                         "tests.support.fork_preload"])
    return _context


def _serve(port: int, env: dict[str, str], log_path: str, cwd: str) -> None:
    """The forked gateway: its environment, its log file on stdout and stderr, uvicorn."""
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (the process's own)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    import uvicorn

    uvicorn.run("app.gateway.main:create_app", factory=True, host="127.0.0.1", port=port,
                log_level="warning", timeout_graceful_shutdown=5)


class ProcessHandle(Protocol):
    """What the tests use of a gateway process, forked or a subprocess.Popen."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


class ForkedProcess:
    """A forked gateway as a subprocess.Popen-like handle."""

    def __init__(self, process: BaseProcess) -> None:
        self._process = process

    @property
    def pid(self) -> int:
        pid = self._process.pid
        assert pid is not None
        return pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired("forked gateway", timeout or 0.0)
        return code

    def terminate(self) -> None:
        self._process.terminate()

    def kill(self) -> None:
        self._process.kill()


def fork_gateway(port: int, env: Mapping[str, str], log_path: Path, cwd: Path
                 ) -> ForkedProcess:
    log_path.touch()
    process = _fork_server().Process(
        target=_serve, args=(port, dict(env), str(log_path), str(cwd)), daemon=True)
    process.start()
    return ForkedProcess(process)


def clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The test process's environment without CHATGATE_ settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATGATE_")}
    env.update(extra)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def spawn_uvicorn(port: int, env: Mapping[str, str], log_path: Path, *options: str,
                  app: str = "app.gateway.main:create_app") -> subprocess.Popen[bytes]:
    """The container's command, `python -m app.gateway.workers` (uvicorn; with `--workers N`,
    a listening socket each), serving the factory `app` (the gateway's by default) on
    127.0.0.1:`port` with `env` (cleaned), stdout and stderr into `log_path`, and uvicorn's
    `options`."""
    with log_path.open("wb") as log_file:
        return subprocess.Popen(
            [sys.executable, "-m", "app.gateway.workers", app,
             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", *options],
            cwd=ROOT, env=clean_env(env), stdout=log_file, stderr=subprocess.STDOUT,
        )


def start_gateway_process(port: int, env: Mapping[str, str], log_path: Path) -> ProcessHandle:
    """A gateway process on `port`, started but not yet answering: forked from the server
    that has the gateway imported, or spawned when a setting it is given is read at import
    time."""
    if spawn_needed(env):
        return spawn_uvicorn(port, env, log_path, "--timeout-graceful-shutdown", "5")
    return fork_gateway(port, clean_env(env), log_path, ROOT)


def wait_for_http(url: str, process: ProcessHandle, log_path: Path) -> None:
    """Poll url until 200; fail with the process's log if it dies or takes too long."""
    deadline = time.monotonic() + START_TIMEOUT_S
    with httpx.Client(timeout=1.0, verify=LOOPBACK_TLS) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{url}: process exited with {process.returncode}\n"
                                   f"{log_path.read_text(errors='replace')[-4000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(url).status_code == 200:
                    return
            time.sleep(0.05)
    raise RuntimeError(f"{url} not up after {START_TIMEOUT_S} s\n"
                       f"{log_path.read_text(errors='replace')[-4000:]}")


def stop_process(process: ProcessHandle) -> None:
    """SIGTERM, then SIGKILL if it has not ended within 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
