"""Real clients the tests run outside pytest's process (node's openai, LiteLLM in its own venv),
each printing one JSON line per conformance case.

When such a client is missing the test skips, loudly, on a developer's machine; under CI
(CI=true or CHATGATE_REQUIRE_BROWSER=1) it fails, so a broken install never passes as green."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.turn.openai.cases import CASES


def required() -> bool:
    return (os.environ.get("CI", "").lower() == "true"
            or os.environ.get("CHATGATE_REQUIRE_BROWSER") == "1")


def missing_client(message: str) -> NoReturn:
    if required():
        pytest.fail(message + " (required under CI)")
    print(f"\n*** SKIPPED: {message} ***", file=sys.stderr)
    pytest.skip(message)


def case_lines(result: subprocess.CompletedProcess[str],
               keys: dict[str, dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each case with the line the client printed for it; every case answered once."""
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert sorted(line["key"] for line in lines) == sorted(keys)
    assert len(lines) == len(CASES)
    return [(keys[line["key"]], line) for line in lines]


class JobProcess:
    """An outside client that stays running and takes one job after another
    (litellm_worker.py): what a test gets back is what a process of its own would have given,
    a CompletedProcess with the job's lines as its stdout, returncode 0 when the job ended
    well, and the error and what the process wrote to stderr meanwhile otherwise.

    The process starts at the first job; one that died or ran out of time is started again
    at the next."""

    def __init__(self, script: Path) -> None:
        self.script = script
        self._process: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._folder = Path(tempfile.mkdtemp(prefix="cg_jobs_"))
        #: The process's stderr, appended to by it and read here through a file of its own.
        self._stderr = self._folder / "stderr.txt"

    def _started(self, python: Path, env: Mapping[str, str]) -> subprocess.Popen[str]:
        if self._process is not None and self._process.poll() is None:
            return self._process
        self._end()
        with open(self._stderr, "a", encoding="utf-8") as stderr:
            process = subprocess.Popen(
                [str(python), str(self.script)], env=dict(env), text=True, bufsize=1,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_read_lines, args=(process, lines), daemon=True,
                         name="cg-job-process").start()
        self._process, self._lines = process, lines
        return process

    def run(self, python: Path, env: Mapping[str, str], job: dict[str, Any],
            timeout: float) -> subprocess.CompletedProcess[str]:
        """`job` done by the process (started with `python` and `env` if none runs)."""
        process = self._started(python, env)
        args = [str(python), str(self.script)]
        assert process.stdin is not None
        errors_from = self._stderr.stat().st_size
        with contextlib.suppress(OSError):  # a process that died: its end is read below
            process.stdin.write(json.dumps(job) + "\n")
            process.stdin.flush()
        out: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self._end()
                raise subprocess.TimeoutExpired(args, timeout, "".join(out)) from None
            if line is None:  # the process ended in the middle of the job
                code = process.wait() or 1
                return subprocess.CompletedProcess(args, code, "".join(out),
                                                   self._errors(errors_from))
            end = _job_end(line)
            if end is None:
                out.append(line)
            elif end["job"] == "done":
                return subprocess.CompletedProcess(args, 0, "".join(out), "")
            else:
                return subprocess.CompletedProcess(
                    args, 1, "".join(out), f"{end.get('error')}\n{self._errors(errors_from)}")

    def _errors(self, start: int) -> str:
        """What the process wrote to stderr from byte `start` on."""
        with open(self._stderr, "rb") as stderr:
            stderr.seek(start)
            return stderr.read().decode("utf-8", errors="replace")

    def _end(self) -> None:
        """End the process: its stdin closed, then killed if it does not end by itself."""
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError):
            if process.stdin is not None:
                process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()

    def stop(self) -> None:
        """End the process and remove its files."""
        self._end()
        shutil.rmtree(self._folder, ignore_errors=True)


def _read_lines(process: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    """Every line the process writes, then None once its stdout closes."""
    assert process.stdout is not None
    with contextlib.suppress(ValueError, OSError):
        for line in process.stdout:
            lines.put(line)
    lines.put(None)


def _job_end(line: str) -> dict[str, Any] | None:
    """The line that ends a job, or None for any other line."""
    try:
        item = json.loads(line)
    except ValueError:
        return None
    return item if isinstance(item, dict) and "job" in item else None
