"""Run one of the operator scripts as `python scripts/NAME.py ARGS` would, inside this process.

A script started as a process spends about 1.5 s of CPU importing the application before it
does anything, and the suite ran a few hundred of them. Here the script's file runs as
`__main__` in a thread of its own (a script calls asyncio.run, which the test's running loop
forbids in its own thread), with its arguments, its environment and its standard streams
swapped in, and its exit status caught as the process's would be: `SystemExit`'s code, or 1
and the traceback on stderr for an uncaught exception.

The environment, `sys.argv` and the standard streams belong to the whole process, so runs are
serialised, and nothing else of the test may read them meanwhile (the test's thread waits for
the run; gateways served from the test process read their settings when they start). What a
process adds, the interpreter's start and exit, is tested by starting each script as a real
process in tests/scripts/test_not_migrated.py."""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path

from app.config.settings import get_settings

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
RUN_TIMEOUT_S = 300.0

_one_at_a_time = threading.Lock()


def run_script(name: str, *args: str, env: Mapping[str, str] | None = None,
               timeout_s: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """scripts/`name` with `args`, in an environment without the test process's CHATGATE_
    settings plus `env`; its exit code, stdout and stderr."""
    script = SCRIPTS / name
    outcome: list[subprocess.CompletedProcess[str]] = []
    worker = threading.Thread(target=lambda: outcome.append(_run(script, list(args), env)),
                              name=f"script-{name}", daemon=True)
    with _one_at_a_time:
        worker.start()
        worker.join(timeout_s)
    if not outcome:
        raise subprocess.TimeoutExpired([str(script), *args], timeout_s)
    return outcome[0]


def _run(script: Path, args: list[str], env: Mapping[str, str] | None
         ) -> subprocess.CompletedProcess[str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    with _environment(env), _argv([str(script), *args]), \
            contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = _exit_code(script)
    return subprocess.CompletedProcess([str(script), *args], code, stdout.getvalue(),
                                       stderr.getvalue())


def _exit_code(script: Path) -> int:
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        sys.stderr.write(f"{exit_.code}\n")
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


@contextlib.contextmanager
def _environment(extra: Mapping[str, str] | None) -> Iterator[None]:
    """The script's environment, and the settings read from it: a process reads them once
    (get_settings is cached), so each run starts, and leaves, with none cached."""
    saved = dict(os.environ)
    for key in [k for k in os.environ if k.startswith("CHATGATE_")]:
        del os.environ[key]
    os.environ.update(extra or {})
    get_settings.cache_clear()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        get_settings.cache_clear()


@contextlib.contextmanager
def _argv(argv: list[str]) -> Iterator[None]:
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
