"""A turn against a model server that answers badly, on both backends: what the client is
sent, what is stored, and what the logs keep. The server is scripted byte for byte over real
HTTP (tests/support/scripted_upstream.py); the database is real."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import structlog

from app.config.settings import Settings
from app.gateway.runtime import Runtime
from app.observe.logging import configure_logging
from app.threads import repository as thread_store
from app.threads import repository as threads_store
from app.turn.native.turn import open_turn
from tests.support.runtimes import runtime_of
from tests.support.scripted_upstream import (
    finish_chunk,
    scripted_upstream,
    sse_body,
)
from tests.turn.wire import WireEvent, on_the_wire

USER_TEXT = "SECRET-USER-TEXT what is the answer?"
MODEL_TEXT = ["SECRET-MODEL-TEXT ", "Hello ", "wor"]
PARTIAL = "SECRET-MODEL-TEXT Hello wor"
TRUNCATED_MARKER = '<!-- METADATA: {"lang'


@asynccontextmanager
async def runtime_against(database_url: str, body: bytes, **answer: str
                          ) -> AsyncIterator[Runtime]:
    async with (
        scripted_upstream(body, **answer) as base_url,
        runtime_of(Settings(database_url=database_url, upstream_base_url=base_url,
                            upstream_max_retries=0, title_calls=False)) as rt,
    ):
        yield rt


async def run_turn(database_url: str, body: bytes, **answer: str
                   ) -> tuple[list[WireEvent], Any]:
    """The events a client is sent, and the stored assistant row."""
    async with runtime_against(database_url, body, **answer) as rt:
        async with rt.db.transaction() as session:
            thread = await thread_store.create_thread(session, "svc", None)
        turn = await open_turn(rt.turn_deps, "svc", thread.id, USER_TEXT)
        events = [on_the_wire(event) async for event in turn.events()]
        async with rt.db.transaction() as session:
            rows = await threads_store.visible_history(session, "svc", thread.id)
    assert [row.role for row in rows] == ["user", "assistant"]
    return events, rows[-1]


def sent_text(events: list[WireEvent]) -> str:
    return "".join(e.data["text"] for e in events if e.event == "delta")


def assert_failed(events: list[WireEvent], stored: Any, code: str, message: str,
                  content: str) -> None:
    """The client is told the code and one sentence; the row keeps what the client saw."""
    assert events[-1].event == "error" and events[-1].data == {"code": code, "message": message}
    assert stored.status == "failed"
    assert stored.meta["error"] == {"code": code, "message": message}
    assert sent_text(events) == stored.content == content


async def test_a_body_that_stops_is_stored_failed_truncated_with_the_partial(
    database_url: str,
) -> None:
    events, stored = await run_turn(database_url, sse_body([*MODEL_TEXT, TRUNCATED_MARKER],
                                                           tail=""))
    assert_failed(events, stored, "upstream_truncated",
                  "The model server's answer broke off before its end.", PARTIAL)


@pytest.mark.parametrize("tail", [
    f"data: {finish_chunk('stop')}\n\n",  # a finish_reason, no [DONE]
    "data: [DONE]\n\n",  # [DONE], no finish_reason
])
async def test_one_end_signal_is_enough_for_complete(database_url: str, tail: str) -> None:
    events, stored = await run_turn(database_url, sse_body(MODEL_TEXT, tail=tail))
    assert events[-1].event == "message_end" and stored.status == "complete"
    assert sent_text(events) == stored.content == PARTIAL


@pytest.mark.parametrize("bad", [
    '{"choices": [{"delta": {"content": 5}}]}',
    '{"id": "no-choices"}',
    '{"choices": {"delta": {"content": "x"}}}',
    "not json at all",
])
async def test_a_malformed_chunk_is_stored_failed_bad_response_never_internal_error(
    database_url: str, bad: str
) -> None:
    body = sse_body(MODEL_TEXT, tail=f"data: {bad}\n\ndata: [DONE]\n\n")
    events, stored = await run_turn(database_url, body)
    assert_failed(events, stored, "upstream_bad_response",
                  "The model server sent an answer the gateway cannot read.", PARTIAL)


async def test_a_200_html_page_is_stored_failed_bad_response(database_url: str) -> None:
    events, stored = await run_turn(database_url, b"<html>Gateway says hi</html>",
                                    content_type="text/html")
    assert_failed(events, stored, "upstream_bad_response",
                  "The model server sent an answer the gateway cannot read.", "")


async def test_an_http_500_is_one_short_sentence_for_the_user(database_url: str) -> None:
    body = json.dumps({"error": {"message": "kaputt", "type": "server_error"}}).encode()
    events, stored = await run_turn(database_url, body, status="500 Internal Server Error",
                                    content_type="application/json")
    assert_failed(events, stored, "upstream_error", "The model server failed (HTTP 500).", "")


@pytest.fixture
def json_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """The gateway's real log configuration (JSON lines, tracebacks), written to a buffer."""
    out = io.StringIO()
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    monkeypatch.setattr(sys, "stdout", out)
    configure_logging("INFO")
    try:
        yield out
    finally:
        structlog.configure(**saved)
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.mark.parametrize("tail", [
    'data: {"choices": [{"delta": {"content": 5}}]}\n\n', "",
])
async def test_the_logs_of_a_bad_answer_carry_codes_and_ids_never_message_text(
    database_url: str, json_logs: io.StringIO, tail: str
) -> None:
    _, stored = await run_turn(database_url, sse_body(MODEL_TEXT, tail=tail))
    assert stored.status == "failed"
    lines = [json.loads(line) for line in json_logs.getvalue().splitlines()]
    assert {"upstream_failed", "turn_failed", "turn_finished"} <= {ln["event"] for ln in lines}
    [failed] = [ln for ln in lines if ln["event"] == "turn_failed"]
    assert failed["code"] == stored.meta["error"]["code"]
    assert failed["message_id"] == str(stored.id) and failed["level"] == "warning"
    assert "SECRET" not in json_logs.getvalue()
