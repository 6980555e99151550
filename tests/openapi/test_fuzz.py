"""A schema-based fuzz of a running gateway against its own OpenAPI document: schemathesis
(`st run`) reads `GET /openapi.json` and sends generated requests, valid and invalid, to
every operation with an admin key (so every route gets past its key), and checks that no
answer is a 5xx and that each status, content type and body (JSON, and each event of an
event stream) is one the document gives. The gateway runs in this process on loopback, in
front of the demo model server, with a thread, its messages and a stored response made
beforehand: half the generated ids are those, and half the models the demo model, so that
a case reaches a real turn or call rather than a 404.

Bounded to about a minute on two cores: a fixed number of cases per operation, a fixed seed
and Hypothesis' deterministic mode, so that a run is the same run each time and a failure
is a real one (its output has the request to replay)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx

from tests.e2e.helpers import new_thread
from tests.support.gateway import DemoLlm, InProcessGateway, StartGateway, parse_sse

#: Cases per operation in the fuzzing phase; the coverage phase adds its own (the edges of
#: each schema, and what lies just past them).
MAX_EXAMPLES = 10
SEED = 20261201
CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_schema_conformance")
#: Any path no other route takes answers 404, and a generated path may be one they take; a
#: thread's live event stream never ends (tests/openapi/test_document.py reads its start).
EXCLUDED_PATHS = ("/v1/{rest}", "/api/threads/{thread_id}/events")
ST = Path(sys.executable).with_name("st")
#: A fuzz that ran far fewer cases than this tested little: a broken setup, not a pass.
MIN_CASES = 500


def _config(ids: dict[str, list[str]]) -> str:
    """schemathesis.toml: half the path ids and models from `ids`; DELETE gets ids of its
    own (what it deletes is gone for the cases after it)."""
    lines = [f"[dictionaries.{name}]\nvalues = {json.dumps(values)}\n"
             for name, values in ids.items()]
    bind = {"path.thread_id": "threads", "path.message_id": "messages",
            "path.response_id": "responses", "body.model": "models"}
    lines.append("[parameters]")
    lines += [f'"{name}" = {{ dictionary = "{table}", probability = 0.5 }}'
              for name, table in bind.items()]
    lines.append('\n[[operations]]\ninclude-method = "DELETE"\nparameters = { '
                 '"path.thread_id" = { dictionary = "doomed_threads", probability = 0.5 }, '
                 '"path.message_id" = { dictionary = "doomed_messages", probability = 0.5 } }')
    return "\n".join(lines) + "\n"


async def _exchange(client: httpx.AsyncClient) -> tuple[str, list[str]]:
    """A thread with one finished exchange: its id, and its messages' ids."""
    thread_id = await new_thread(client)
    response = await client.post(f"/api/threads/{thread_id}/messages",
                                 json={"content": "Hello"})
    start = next(e for e in parse_sse(response.text) if e.event == "message_start").data
    return thread_id, [start["user_message_id"], start["assistant_message_id"]]


async def _fixtures(gateway: InProcessGateway, key: str) -> dict[str, list[str]]:
    async with gateway.client(key) as client:
        thread_id, message_ids = await _exchange(client)
        doomed_thread, doomed_messages = await _exchange(client)
        response = await client.post("/v1/responses", json={"model": "demo-1", "input": "Hi"})
        assert response.status_code == 200, response.text
    return {"threads": [thread_id], "messages": message_ids,
            "responses": [response.json()["id"]], "doomed_threads": [doomed_thread],
            "doomed_messages": doomed_messages[:1], "models": ["demo-1"]}


async def test_the_running_gateway_answers_as_its_document_says(
    start_gateway: StartGateway, demo_llm: DemoLlm, tmp_path: Path
) -> None:
    gateway = start_gateway("sqlite", upstream=demo_llm, env={
        "CHATGATE_TITLE_CALLS": "false", "CHATGATE_SUMMARY_CALLS": "false",
        "CHATGATE_RATE_LIMIT_PER_MINUTE": "0", "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "10",
        "CHATGATE_RESUME_GRACE_S": "30"})
    key = await gateway.api_key("fuzzer", admin=True)
    config = tmp_path / "schemathesis.toml"
    config.write_text(_config(await _fixtures(gateway, key)), encoding="utf-8")
    report = tmp_path / "report.json"
    command = [
        str(ST), "--config-file", str(config), "run", f"{gateway.url}/openapi.json",
        "--url", gateway.url, "--header", f"Authorization: Bearer {key}",
        "--checks", CHECKS, "--phases", "examples,coverage,fuzzing",
        "--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED),
        "--generation-deterministic", "--workers", "1", "--request-timeout", "60",
        "--no-color", "--report", "json", "--report-json-path", str(report),
        *[arg for path in EXCLUDED_PATHS for arg in ("--exclude-path", path)],
    ]
    result = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True,
                                     timeout=300, cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-30_000:]
    cases = json.loads(report.read_text(encoding="utf-8"))["test_cases"]["generated"]
    print(f"schemathesis ran {cases} cases")  # shown with -s, and in the report of a failure
    assert cases >= MIN_CASES, output[-30_000:]
