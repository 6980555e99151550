"""No secret leaves in a log line, an error body or a stream trace: the rule itself (known
secrets, credential shapes), then a gateway whose model server quotes its key back in error
bodies on every surface (native turn, its title call, chat completions, the Responses API),
and a stream trace of an answer that holds the key."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from openai import APIStatusError, AsyncOpenAI

from app.observe.redaction import REDACTED, Redactor, secrets_of, url_password
from tests.e2e.helpers import keyed_client, new_thread
from tests.support.gateway import StartGateway, post_turn
from tests.support.scripted_upstream import scripted_upstream, sse_body
from tests.support.scripts import run_script

KNOWN = "upstream-0f3c9a7e5b1d4c2a"


def test_a_known_secret_is_replaced_wherever_it_stands() -> None:
    redactor = Redactor()
    redactor.know(KNOWN, None, "short")
    assert redactor.text(f"key={KNOWN};") == f"key={REDACTED};"
    assert redactor.text("a short word") == "a short word"  # under MIN_SECRET_CHARS


def test_a_secret_holding_another_is_replaced_whole() -> None:
    redactor = Redactor()
    redactor.know("abcdefgh", "abcdefgh-and-more")
    assert redactor.text("x abcdefgh-and-more y") == f"x {REDACTED} y"


@pytest.mark.parametrize(("text", "expected"), [
    ("Authorization: Bearer cg_abcdefghijklmnopqrstuvwxyz012345",
     f"Authorization: Bearer {REDACTED}"),
    ("bearer abcdefghijklmnop.qrs", f"bearer {REDACTED}"),
    ("Incorrect API key provided: sk-proj-abcdEFGH1234****wxyz.",
     f"Incorrect API key provided: {REDACTED}."),
    ("key cg_Zm9vYmFyYmF6cXV4cXV1eA", f"key {REDACTED}"),
    ("postgresql+asyncpg://chat:hunter2@db:5432/chat",
     f"postgresql+asyncpg://chat:{REDACTED}@db:5432/chat"),
    ("redis://:s3cret@cache:6379/0", f"redis://:{REDACTED}@cache:6379/0"),
])
def test_credential_shapes_are_replaced_unknown_or_not(text: str, expected: str) -> None:
    assert Redactor().text(text) == expected


@pytest.mark.parametrize("text", [
    "a Bearer header", "sk-learn", "cg_short", "https://example.com/path?q=1",
    "user@example.com", "a:b@c",
])
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert Redactor().text(text) == text


def test_every_string_of_a_nested_value_is_redacted() -> None:
    redactor = Redactor()
    redactor.know(KNOWN)
    value = {"detail": KNOWN, "nested": [{"k": (KNOWN, 3)}], KNOWN: None,
             "error": ValueError(f"failed with {KNOWN}")}
    assert redactor.value(value) == {
        "detail": REDACTED, "nested": [{"k": [REDACTED, 3]}], REDACTED: None,
        "error": f"ValueError: failed with {REDACTED}"}


def test_the_secrets_a_process_starts_with() -> None:
    assert url_password("postgresql://u:pw@h/db") == "pw"
    assert url_password("sqlite+aiosqlite:///var/chatgate.db") is None
    assert url_password("http://[::1") is None  # unparseable: nothing, no error
    assert secrets_of(["k1", None], ["redis://:r@h", None]) == ["k1", "r"]


# -- a gateway whose model server quotes the key -----------------------------------------


def quoting_error(status: int) -> bytes:
    """OpenAI's own 401 body, with the whole key quoted (some servers do that)."""
    return json.dumps({"error": {
        "message": f"Incorrect API key provided: {KNOWN}. You can find your API key at "
                   f"https://platform.openai.com/account/api-keys.",
        "type": "invalid_request_error", "param": None, "code": f"status_{status}"}}).encode()


@pytest.mark.parametrize("status", ["401 Unauthorized", "400 Bad Request",
                                    "500 Internal Server Error"])
async def test_a_key_quoted_by_the_model_server_reaches_no_log_and_no_client(
    start_gateway: StartGateway, status: str,
) -> None:
    async with scripted_upstream(quoting_error(int(status[:3])), status=status,
                                 content_type="application/json") as base_url:
        gateway = start_gateway("sqlite", upstream=base_url,
                                env={"CHATGATE_UPSTREAM_API_KEY": KNOWN})
        answers: list[str] = []
        async with await keyed_client(gateway, "leaky") as client:
            thread_id = await new_thread(client)
            answers.append((await post_turn(client, thread_id, "hello")).raw)  # title too
            sdk = AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=client.headers[
                "Authorization"].removeprefix("Bearer "), http_client=client, max_retries=0)
            for call in (
                lambda: sdk.chat.completions.create(
                    model="demo-1", messages=[{"role": "user", "content": "hi"}]),
                lambda: sdk.chat.completions.create(
                    model="demo-1", messages=[{"role": "user", "content": "hi"}], stream=True),
                lambda: sdk.responses.create(model="demo-1", input="hi"),
                lambda: sdk.responses.create(model="demo-1", input="hi", stream=True),
            ):
                with pytest.raises(APIStatusError) as raised:
                    await call()
                answers.append(raised.value.response.text)
    log = gateway.log_text()
    assert KNOWN not in log and all(KNOWN not in answer for answer in answers)
    failures = [line for line in gateway.logs() if line.get("event") == "upstream_failed"]
    assert len(failures) >= 6  # the title call, the turn, two chat calls, two responses
    assert all(REDACTED in line["detail"] for line in failures)
    assert any(line.get("event") == "title_call_failed" for line in gateway.logs())


async def test_a_trace_and_its_file_hold_no_secret(start_gateway: StartGateway,
                                                   tmp_path: Path) -> None:
    said = ["Your key is ", KNOWN, " and mine sk-proj-abcdefghijklmnopqrst1234."]
    async with scripted_upstream(sse_body(said)) as base_url:
        gateway = start_gateway("sqlite", upstream=base_url, env={
            "CHATGATE_UPSTREAM_API_KEY": KNOWN, "CHATGATE_TRACE_STREAMS": "all",
            "CHATGATE_TITLE_CALLS": "false"})
        async with await keyed_client(gateway, "tracer") as client:
            result = await post_turn(client, await new_thread(client), "what is my key?")
    message_id = result.one("message_start")["assistant_message_id"]
    assert KNOWN in result.text  # the model's answer is the user's: shown as it came
    path = tmp_path / "trace.json"
    exported = run_script(  # run where the gateway runs: its environment holds the key
        "replay_stream.py", "export", "--message-id", str(uuid.UUID(message_id)),
        "--database-url", gateway.database_url, "--out", str(path),
        env={"CHATGATE_UPSTREAM_API_KEY": KNOWN})
    assert exported.returncode == 0, exported.stderr
    trace = path.read_text(encoding="utf-8")
    assert KNOWN not in trace and "sk-proj-abcdefghijklmnopqrst" not in trace
    assert REDACTED in trace
    replayed = run_script("replay_stream.py", "--file", str(path), env={"COLUMNS": "200"})
    assert "2 chunk(s) held a secret" in replayed.stdout
    assert KNOWN not in gateway.log_text()
