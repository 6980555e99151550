"""`scripts/serve` with a bad models file: one sentence naming the entry and the field, exit
2, nothing said about listening."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import httpx

from tests.e2e.helpers import new_thread
from tests.scripts.conftest import SERVE
from tests.scripts.test_bad_settings import _run, assert_one_sentence
from tests.support.gateway import clean_env, free_port, post_turn, wait_for_http


def test_serve_refuses_a_bad_models_file_in_one_sentence(installed_venv: None,
                                                         tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text('[servers.a]\nbase_url = "http://127.0.0.1:9/v1"\n\n'
                    '[[models]]\nname = "one"\nserver = "a"\nfallbacks = ["two"]\n')
    done = _run([str(SERVE), "--port", str(free_port())],
                {"CHATGATE_MODELS_FILE": str(path)}, tmp_path)
    assert_one_sentence(done, "CHATGATE_MODELS_FILE: model 'one': field 'fallbacks' names "
                              "'two', which is no model; the models are 'one'")


def test_serve_refuses_a_models_file_url_with_credentials_without_repeating_them(
        installed_venv: None, tmp_path: Path) -> None:
    """Every call to that model would fail (the client sends the key as a bearer token and
    refuses a URL with credentials besides): the start is refused, pointing to where the key
    goes, and the password is not said."""
    path = tmp_path / "models.toml"
    path.write_text('[servers.a]\nbase_url = "https://me:hunter2@api.example.com/v1"\n\n'
                    '[[models]]\nname = "one"\nserver = "a"\n')
    done = _run([str(SERVE), "--port", str(free_port())],
                {"CHATGATE_MODELS_FILE": str(path)}, tmp_path)
    assert_one_sentence(done, "CHATGATE_MODELS_FILE: server 'a': field 'base_url' must not "
                              "hold a user name and password; name the environment variable "
                              "that holds the key in field 'api_key_env'")
    assert "hunter2" not in done.stdout + done.stderr


def test_serve_refuses_a_demo_port_that_would_not_apply(installed_venv: None,
                                                        tmp_path: Path) -> None:
    """--demo-port with an upstream (or a models file without the demo model) started no
    demo model server and said nothing; now the reason is the one sentence."""
    done = _run([str(SERVE), "--port", str(free_port()), "--demo-port", str(free_port())],
                {"CHATGATE_UPSTREAM_BASE_URL": "http://127.0.0.1:9/v1"}, tmp_path)
    assert_one_sentence(done, f"--demo-port {done.args[-1]} does not apply: no demo model "
                              "server starts, as CHATGATE_UPSTREAM_BASE_URL is set")
    path = tmp_path / "models.toml"
    path.write_text('[servers.a]\nbase_url = "http://127.0.0.1:9/v1"\n\n'
                    '[[models]]\nname = "one"\nserver = "a"\n')
    done = _run([str(SERVE), "--port", str(free_port()), "--demo-port", str(free_port())],
                {"CHATGATE_MODELS_FILE": str(path)}, tmp_path)
    assert_one_sentence(done, f"--demo-port {done.args[-1]} does not apply: no demo model "
                              "server starts, as the models file names no server with "
                              'base_url = "demo"')


async def test_serve_starts_the_demo_model_server_a_models_file_names(
        installed_venv: None, tmp_path: Path) -> None:
    """A models file with the demo model beside a server that is not there: serve starts
    the demo model server on --demo-port, a turn on the demo model answers, and /readyz
    tells the two servers apart (it called both healthy, and the turn failed)."""
    port, demo_port, closed = free_port(), free_port(), free_port()
    path = tmp_path / "models.toml"
    path.write_text('[servers.try]\nbase_url = "demo"\n\n'
                    f'[servers.gone]\nbase_url = "http://127.0.0.1:{closed}/v1"\n\n'
                    '[[models]]\nname = "demo"\nserver = "try"\n\n'
                    '[[models]]\nname = "real"\nserver = "gone"\n')
    log_path = tmp_path / "serve.log"
    env = clean_env({"CHATGATE_MODELS_FILE": str(path), "CHATGATE_DEMO_DELAY_MS": "0",
                     "CHATGATE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/chatgate.db"})
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [str(SERVE), "--port", str(port), "--demo-port", str(demo_port)], cwd=tmp_path,
            env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_http(url + "/readyz", process, log_path)
        async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
            thread_id = await new_thread(client)
            result = await post_turn(client, thread_id, "Hello")
            ready = (await client.get("/readyz")).json()
        assert result.status_code == 200, result.raw
        assert result.one("message_end")["status"] == "complete", result.raw
        assert "demo model" in result.text
        states = {s["server"]: s["state"] for s in ready["model_servers"]}
        assert states == {"try": "healthy", "gone": "unreachable"}
        assert f"127.0.0.1:{demo_port}" in log_path.read_text(errors="replace")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
