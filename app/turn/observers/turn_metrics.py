"""Feeds the gateway's Prometheus metrics (app/observe/metrics.py) from each turn; no I/O
(multiprocess mode writes to a memory-mapped file)."""

from __future__ import annotations

import datetime as dt
import time

from app.answer.finish import TurnOutcome
from app.answer.records import FinishedMessage
from app.observe.metrics import UPSTREAM_CODES, GatewayMetrics, gateway_overhead_s
from app.stream import FilterWarning
from app.turn.observers.seam import ContextDraft, TurnHandler, TurnView


class MetricsObserver:
    def __init__(self, metrics: GatewayMetrics) -> None:
        self.metrics = metrics

    def open(self, view: TurnView) -> TurnHandler:
        return turn_metrics(self.metrics)


def turn_metrics(metrics: GatewayMetrics) -> TurnHandler:
    """The metrics of one turn, for a call that has no TurnView (no thread)."""
    return _MetricsHandler(metrics)


class _MetricsHandler(TurnHandler):
    """Counts the turn in the active-streams gauge from its first stage to its settled end
    (stored, or given up on: `not_stored`)."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self.metrics = metrics
        self.active = False

    async def before_main(self, draft: ContextDraft) -> None:
        self.metrics.active_streams.inc()
        self.active = True

    def on_warning(self, warning: FilterWarning) -> None:
        self.metrics.filter_warnings.labels(kind=warning.kind).inc()

    async def after_finish(
        self, finished: FinishedMessage, outcome: TurnOutcome, *, stored: bool
    ) -> None:
        now, now_wall = time.monotonic(), dt.datetime.now(dt.UTC)
        m = self.metrics
        if self.active:
            self.active = False
            m.active_streams.dec()
        if not stored:
            m.turns.labels(status="not_stored").inc()
            return
        m.turns.labels(status=finished.status).inc()
        if outcome.first_token is not None:
            m.ttft.observe(max(0.0, outcome.first_token - outcome.started))
        spans = [(c.started_at, c.finished_at or now_wall) for c in outcome.calls]
        m.overhead.observe(gateway_overhead_s(outcome.started, now, now_wall, spans))
        for call in finished.llm_calls:
            m.tokens.labels(model=call.model, kind="prompt").inc(call.prompt_tokens)
            m.tokens.labels(model=call.model, kind="completion").inc(call.completion_tokens)
        failure = outcome.failure
        if failure is not None and failure.code in UPSTREAM_CODES:
            status = str(failure.http_status) if failure.http_status else "none"
            m.upstream_errors.labels(code=failure.code, http_status=status).inc()
