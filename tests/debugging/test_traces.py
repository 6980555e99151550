"""Stream traces end to end, on both backends: an in-process gateway with
CHATGATE_TRACE_STREAMS set, the demo model's scenarios, and scripts/replay_stream.py's command
line against the gateway's database (run in this process: tests/support/scripts.py)."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from app.answer.trace_replay import Trace
from app.store.db import Database
from app.store.models import Message
from app.turn.rows import traces
from tests.e2e.helpers import keyed_client, new_thread, wait_for_status
from tests.support.gateway import (
    DemoLlm,
    GatewayPool,
    LiveGateway,
    iter_sse,
    post_turn,
)
from tests.support.scripts import run_script

SEED_BUG_WARNINGS = ["context_echo", "metadata_at_start", "unclosed_block"]


@pytest.fixture(scope="module")
def errors_gateway(live_backend: str, demo_llm: DemoLlm, live_log_dir: Path
                   ) -> Iterator[LiveGateway]:
    with GatewayPool(live_log_dir) as pool:
        yield pool.start(live_backend, upstream=demo_llm,
                         env={"CHATGATE_TRACE_STREAMS": "errors"})


@pytest.fixture(scope="module")
def all_gateway(live_backend: str, demo_llm: DemoLlm, live_log_dir: Path
                ) -> Iterator[LiveGateway]:
    with GatewayPool(live_log_dir) as pool:
        yield pool.start(live_backend, upstream=demo_llm, env={"CHATGATE_TRACE_STREAMS": "all"})


async def turn(client: httpx.AsyncClient, content: str) -> tuple[str, str]:
    """(assistant message id, the text the client saw) of one finished turn."""
    thread_id = await new_thread(client)
    result = await post_turn(client, thread_id, content)
    assert result.status_code == 200, result.raw
    message_id: str = result.one("message_start")["assistant_message_id"]
    return message_id, result.text


async def load(gateway: LiveGateway, message_id: str) -> Trace | None:
    db = Database(gateway.database_url)
    try:
        async with db.transaction() as session:
            return await traces.load_trace(session, uuid.UUID(message_id))
    finally:
        await db.dispose()


def replay_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_script("replay_stream.py", *args, env={"COLUMNS": "200"})


def replay_json(*args: str) -> tuple[int, dict[str, Any]]:
    done = replay_cli(*args, "--json")
    assert done.returncode in (0, 1), done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return done.returncode, report


async def test_errors_mode_traces_the_bad_and_failed_streams_only(
    errors_gateway: LiveGateway,
) -> None:
    async with await keyed_client(errors_gateway, "tracer") as client:
        bad_id, bad_text = await turn(client, "Hello [seed-bug]")
        clean_id, _ = await turn(client, "Hello, a clean question")
        failed_id, _ = await turn(client, "[error-mid] cut me off")
    bad = await load(errors_gateway, bad_id)
    assert bad is not None
    assert bad.status == "complete" and bad.stored_content == bad_text
    assert [(w["kind"], w["chunk_index"]) for w in bad.recorded_warnings] == [
        (kind, 0) for kind in SEED_BUG_WARNINGS]
    assert bad.chunks[0].startswith("<!-- MSG_CONTEXT:")  # raw, markers and all
    assert await load(errors_gateway, clean_id) is None
    failed = await load(errors_gateway, failed_id)
    assert failed is not None and failed.status == "failed"
    assert failed.finish["error"] == "upstream_error"
    traced = [line for line in errors_gateway.logs() if line.get("event") == "stream_traced"]
    assert {line["message_id"] for line in traced} == {bad_id, failed_id}


async def test_all_mode_traces_every_stream(all_gateway: LiveGateway) -> None:
    async with await keyed_client(all_gateway, "tracer") as client:
        clean_id, clean_text = await turn(client, "Hello, a clean question")
        bad_id, _ = await turn(client, "Hello [seed-bug]")
    clean = await load(all_gateway, clean_id)
    assert clean is not None and clean.recorded_warnings == []
    assert clean.stored_content == clean_text and "".join(clean.chunks).startswith(clean_text)
    assert await load(all_gateway, bad_id) is not None
    code, report = replay_json("--message-id", clean_id, "--database-url",
                               all_gateway.database_url)
    assert code == 0 and report["matches"] and report["warnings"] == []
    assert report["metadata"] == report["stored_metadata"] == {
        "language": "en", "sources": [], "awaiting": None}


async def test_replay_reproduces_a_traced_bad_stream(errors_gateway: LiveGateway) -> None:
    async with await keyed_client(errors_gateway, "replayer") as client:
        message_id, seen = await turn(client, "Hello [seed-bug]")
    url = errors_gateway.database_url
    done = replay_cli("--message-id", message_id, "--database-url", url)
    assert done.returncode == 0, done.stdout + done.stderr
    for kind in SEED_BUG_WARNINGS:
        assert f"warning raised at chunk 0: {kind} (" in done.stdout
    assert "replay == stored content: yes" in done.stdout
    code, report = replay_json("--message-id", message_id, "--database-url", url)
    assert code == 0 and report["matches"]
    assert report["content"] == report["stored_content"] == seen
    assert [(w["kind"], w["chunk_index"]) for w in report["warnings"]] == [
        (kind, 0) for kind in SEED_BUG_WARNINGS]
    assert [w["kind"] for w in report["steps"][0]["warnings"]] == SEED_BUG_WARNINGS
    assert report["metadata"] == {"language": "cs"}


async def test_trace_file_round_trip(errors_gateway: LiveGateway, tmp_path: Path) -> None:
    async with await keyed_client(errors_gateway, "exporter") as client:
        message_id, seen = await turn(client, "Hello [seed-bug] [awaiting:question]")
    path = tmp_path / "trace.json"
    exported = replay_cli("--message-id", message_id, "--database-url",
                          errors_gateway.database_url, "--out", str(path))
    assert exported.returncode == 0, exported.stderr
    code, report = replay_json("--file", str(path))
    assert code == 0 and report["content"] == seen and report["message_id"] == message_id
    assert [w["kind"] for w in report["warnings"]] == SEED_BUG_WARNINGS
    assert report["metadata"] == {"language": "cs", "awaiting": "question"}
    data = json.loads(path.read_text(encoding="utf-8"))
    data["stored_content"] = seen.replace("Aha", "Oho")
    path.write_text(json.dumps(data), encoding="utf-8")
    code, report = replay_json("--file", str(path))
    assert code == 1 and not report["matches"] and report["divergence"] == 0
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    assert replay_cli("--file", str(broken)).returncode == 2


async def test_tampered_stored_content_makes_the_replay_fail(
    errors_gateway: LiveGateway,
) -> None:
    async with await keyed_client(errors_gateway, "tamperer") as client:
        message_id, seen = await turn(client, "Hello [seed-bug]")
    db = Database(errors_gateway.database_url)
    try:
        async with db.transaction() as session:
            await session.execute(update(Message).where(Message.id == uuid.UUID(message_id))
                                  .values(content=seen + " (edited)"))
    finally:
        await db.dispose()
    done = replay_cli("--message-id", message_id, "--database-url", errors_gateway.database_url)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "replay == stored content: NO" in done.stdout
    assert "changed after the stream" in done.stdout
    missing = replay_cli("--message-id", str(uuid.uuid4()), "--database-url",
                         errors_gateway.database_url)
    assert missing.returncode == 2 and "no stream trace" in missing.stderr


async def test_an_interrupted_stream_is_traced_and_replays(all_gateway: LiveGateway) -> None:
    async with await keyed_client(all_gateway, "leaver", over_http=True) as client:
        thread_id = await new_thread(client)
        message_id = ""
        async with client.stream("POST", f"/api/threads/{thread_id}/messages",
                                 json={"content": "[long] please write a lot"}) as response:
            async for event in iter_sse(response):
                if event.event == "message_start":
                    message_id = event.data["assistant_message_id"]
                if event.event == "delta":
                    break
        await wait_for_status(client, thread_id, "interrupted")
    trace = await load(all_gateway, message_id)
    assert trace is not None and trace.status == "interrupted" and not trace.filter_closed
    code, report = replay_json("--message-id", message_id, "--database-url",
                               all_gateway.database_url)
    assert code == 0 and report["matches"] and not report["filter_closed"]
