"""Logs are JSON lines on stdout, uvicorn's own included: under uvicorn's CLI (the Docker entry
point) its loggers come with plain-text handlers that would bypass the JSON renderer. A
person at a terminal gets readable lines instead, unless JSON is asked for."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PROBE = """
import logging.config
import uvicorn.config
logging.config.dictConfig(uvicorn.config.LOGGING_CONFIG)  # what `uvicorn ...` sets up
from app.observe.logging import configure_logging, get_logger
configure_logging("INFO")
logging.getLogger("uvicorn.error").error("uvicorn says hello")
try:
    raise ValueError("boom")
except ValueError:
    logging.getLogger("uvicorn.error").exception("Exception in ASGI application")
get_logger("probe").info("gateway_line", thread_id="t1")
"""


def test_every_line_is_json_uvicorns_own_and_tracebacks_included() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stderr == ""
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["event"] for line in lines] == [
        "uvicorn says hello", "Exception in ASGI application", "gateway_line"]
    assert lines[0]["logger"] == "uvicorn.error" and lines[0]["level"] == "error"
    [error] = lines[1]["exception"]
    assert (error["exc_type"], error["exc_value"]) == ("ValueError", "boom")
    assert error["frames"]  # the traceback itself, not "<traceback object at ...>"
    assert lines[2]["thread_id"] == "t1"


TTY_PROBE = """
import sys
from app.observe.logging import configure_logging, get_logger
configure_logging("INFO", sys.argv[1])
get_logger("probe").info("gateway_line", thread_id="t1")
"""


def run_on_a_terminal(log_format: str) -> str:
    """The probe's stdout when it is a terminal (a person running scripts/serve)."""
    leader, follower = pty.openpty()
    try:
        subprocess.run([sys.executable, "-c", TTY_PROBE, log_format], cwd=REPO, stdout=follower,
                       stderr=subprocess.PIPE, timeout=60, check=True)
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal is closed and drained
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode()
    finally:
        os.close(leader)


def test_a_terminal_gets_readable_lines_unless_json_is_asked_for() -> None:
    readable = run_on_a_terminal("auto").strip()
    assert not readable.startswith("{")
    assert "gateway_line" in readable and "thread_id=t1" in readable
    forced = json.loads(run_on_a_terminal("json").strip())
    assert (forced["event"], forced["thread_id"]) == ("gateway_line", "t1")


LOCALS_PROBE = """
import logging
from app.observe.logging import configure_logging, get_logger
configure_logging("INFO")
def answer(user_text):
    chunk = {"content": "SECRET-MODEL-TEXT"}
    raise TypeError("bad chunk")
try:
    answer("SECRET-USER-TEXT")
except TypeError:
    get_logger("probe").exception("turn_error")
    logging.getLogger("probe.stdlib").exception("stdlib_error")
"""


def test_tracebacks_show_frames_but_never_their_local_variables() -> None:
    """A failing turn's frames hold the user's words and the model's answer."""
    done = subprocess.run([sys.executable, "-c", LOCALS_PROBE], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=True)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["event"] for line in lines] == ["turn_error", "stdlib_error"]
    for line in lines:
        [error] = line["exception"]
        assert error["exc_type"] == "TypeError" and error["frames"]
    assert "SECRET" not in done.stdout


HTTPX_PROBE = """
import logging, sys
from app.observe.logging import configure_logging
configure_logging(sys.argv[1], "json")
logging.getLogger("httpx").info('HTTP Request: POST http://model/v1/chat/completions "200 OK"')
logging.getLogger("httpx").warning("httpx warns")
"""


def test_httpx_says_nothing_of_each_request_unless_debugging() -> None:
    """A line per upstream call that only says the model server answered would be most of a
    turn's log lines at INFO; its warnings still come through, and at DEBUG everything."""
    def events(level: str) -> list[str]:
        done = subprocess.run([sys.executable, "-c", HTTPX_PROBE, level], cwd=REPO,
                              capture_output=True, text=True, timeout=60, check=True)
        return [json.loads(line)["event"] for line in done.stdout.splitlines()]

    assert events("INFO") == ["httpx warns"]
    assert len(events("DEBUG")) == 2


SECRET_PROBE = """
import logging, sys
from app.observe.logging import configure_logging, get_logger
configure_logging("INFO", sys.argv[1])
url = "postgresql+asyncpg://chat:hunter2-pw@db:5432/chat"
try:
    raise ConnectionError(f"cannot reach {url}")
except ConnectionError:
    get_logger("probe").exception("database_failed")
    logging.getLogger("uvicorn.error").exception("Exception in ASGI application")
get_logger("probe").warning("upstream_failed", detail={"said": ["Bearer cg_" + "k" * 40]})
"""


def test_no_password_or_key_reaches_a_line_traceback_or_not() -> None:
    """A traceback whose text holds a database URL with its password, through the gateway's
    logger and a library's, as JSON and as readable lines."""
    for log_format in ("json", "console"):
        done = subprocess.run([sys.executable, "-c", SECRET_PROBE, log_format], cwd=REPO,
                              capture_output=True, text=True, timeout=60, check=True)
        assert "hunter2" not in done.stdout and "kkkkkkkk" not in done.stdout, done.stdout
        assert done.stdout.count("chat:[REDACTED]@db") == 2
        assert "Bearer [REDACTED]" in done.stdout
