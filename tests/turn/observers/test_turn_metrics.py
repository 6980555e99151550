"""The metrics observer without servers: each turn's handler keeps the active-streams gauge
honest, whether its finish was stored or given up on."""

from __future__ import annotations

import datetime as dt
import time
import uuid

from app.answer.events import TurnFailure
from app.answer.finish import TurnOutcome
from app.answer.records import FinishedMessage
from app.observe.metrics import GatewayMetrics
from app.turn.observers.seam import ContextDraft, TurnView
from app.turn.observers.turn_metrics import MetricsObserver
from tests.observe.test_metrics import sample

NOW = dt.datetime(2026, 11, 22, 12, 0, 0, tzinfo=dt.UTC)


def view() -> TurnView:
    return TurnView(
        user_id="u", thread_id=uuid.uuid4(), message_id=uuid.uuid4(),
        user_message_id=uuid.uuid4(), user_text="hi", user_message_at=NOW, synthetic=False,
        hidden=False, thread_title=None, thread_summary=None, history=())


def outcome(failure: TurnFailure | None = None) -> TurnOutcome:
    started = time.monotonic() - 1.0
    return TurnOutcome(
        status="failed" if failure else "complete", failure=failure, finish_reason="stop",
        model="demo-1", text_chunks=3, raw_chunks=None, warnings=(), filter_closed=True,
        started=started, first_token=started + 0.25, calls=())


def finished(status: str = "complete") -> FinishedMessage:
    return FinishedMessage(uuid.uuid4(), "answer", {}, status)  # type: ignore[arg-type]


async def test_a_turn_that_is_never_stored_leaves_the_active_gauge() -> None:
    metrics = GatewayMetrics()
    handler = MetricsObserver(metrics).open(view())
    await handler.before_main(ContextDraft(summary=None))
    assert sample(metrics, "chatgate_active_streams") == 1
    await handler.after_finish(finished(), outcome(), stored=False)
    assert sample(metrics, "chatgate_active_streams") == 0
    assert sample(metrics, "chatgate_turns_total", status="not_stored") == 1
    assert sample(metrics, "chatgate_turns_total", status="complete") == 0


async def test_a_stored_turn_counts_its_status_first_token_and_upstream_error() -> None:
    metrics = GatewayMetrics()
    handler = MetricsObserver(metrics).open(view())
    await handler.before_main(ContextDraft(summary=None))
    failure = TurnFailure("upstream_error", "The model server failed (HTTP 502).", 502)
    await handler.after_finish(finished("failed"), outcome(failure), stored=True)
    assert sample(metrics, "chatgate_active_streams") == 0
    assert sample(metrics, "chatgate_turns_total", status="failed") == 1
    assert sample(metrics, "chatgate_time_to_first_token_seconds_count") == 1
    assert sample(metrics, "chatgate_upstream_errors_total", code="upstream_error",
                  http_status="502") == 1
