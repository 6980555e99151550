"""Prometheus metrics of the gateway, on a registry the application owns (never the
library's global one, so two apps in one process do not share or clash).

    chatgate_active_streams                      gauge: turns between the start of their
                                                 answer and their stored end, this process
    chatgate_turns_total{status}                 complete | interrupted | failed, counted once
                                                 the message is stored; `not_stored` for a turn
                                                 whose finishing transaction never committed
    chatgate_time_to_first_token_seconds         turn start -> first upstream content chunk
                                                 (the stored `ttft_ms`)
    chatgate_gateway_overhead_seconds            see `gateway_overhead_s`
    chatgate_filter_warnings_total{kind}         MarkerFilter warnings (context_echo, ...)
    chatgate_tokens_total{model,kind}            kind = prompt | completion, every upstream call
                                                 of the turn (as stored in llm_calls)
    chatgate_streams_swept_total{reason}         `streaming` rows a sweep made `interrupted`:
                                                 process_died | stale_streaming
    chatgate_background_failures_total{task}     heartbeat | checkpoint | revocation_check |
                                                 stale_sweep | refusal_flush rounds that failed
                                                 (database down)
    chatgate_checkpoint_writes_total             stream checkpoints written (rows)
    chatgate_database_unavailable_total          requests answered 503 database_unavailable
    chatgate_streams_revoked_total               open SSE streams ended: their key was revoked
    chatgate_upstream_errors_total{code,http_status}  upstream_unavailable | upstream_timeout |
                                                 upstream_error | upstream_truncated |
                                                 answer_too_long |
                                                 upstream_bad_response, one per failed turn; the
                                                 server's HTTP status, or "none"
    chatgate_refusals_total{reason}              turn requests refused before anything was
                                                 stored or sent: too_many_streams |
                                                 rate_limited | budget_exceeded | gateway_busy
    chatgate_event_loop_lag_seconds              how late the last probe's timer fired: the
                                                 process is saturated past a few milliseconds
    chatgate_chunks_held_total                   chunks of streaming turns that waited for
                                                 opening ones (app/turn/holds/precedence.py)
    chatgate_model_server_requests_total{server} requests sent to each model server
    chatgate_model_server_failures_total{server,code}  of them, those that failed
    chatgate_model_server_cooldown_until{server} unix time a cooling server is tried again
                                                 (0: healthy)
    chatgate_model_fallbacks_total{from,to}      answers sent to the next model of the list
                                                 before their first token
    chatgate_model_continuations_total{from,to}  answers finished by another call after a
                                                 mid-answer failure

Several worker processes: each has its own values. When PROMETHEUS_MULTIPROC_DIR is set in
the environment before the process starts (prometheus_client reads it at import), values are
written to files in that directory and `exposition()` merges every process's files, so any
worker answers /metrics for all of them (docs/production.md).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence

from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import multiprocess as prom_multiprocess

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
UPSTREAM_CODES = frozenset({"upstream_unavailable", "upstream_timeout", "upstream_error",
                            "upstream_truncated", "upstream_bad_response", "answer_too_long"})
TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
OVERHEAD_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class GatewayMetrics:
    """The gateway's metrics and their text exposition."""

    def __init__(self, multiproc_dir: str | None = None) -> None:
        self.multiproc_dir = multiproc_dir or os.environ.get(MULTIPROC_ENV) or None
        self.registry = CollectorRegistry()
        r = self.registry
        self.active_streams = Gauge(
            "chatgate_active_streams", "Turns streaming an answer (started, not yet stored).",
            registry=r, multiprocess_mode="livesum")
        self.turns = Counter(
            "chatgate_turns", "Finished turns by stored status.", ["status"], registry=r)
        self.ttft = Histogram(
            "chatgate_time_to_first_token_seconds",
            "Turn start to the first upstream content chunk.", registry=r, buckets=TTFT_BUCKETS)
        self.overhead = Histogram(
            "chatgate_gateway_overhead_seconds",
            "Turn wall time minus the time spent in upstream calls (docs/production.md).",
            registry=r, buckets=OVERHEAD_BUCKETS)
        self.filter_warnings = Counter(
            "chatgate_filter_warnings", "MarkerFilter warnings by kind.", ["kind"], registry=r)
        self.tokens = Counter(
            "chatgate_tokens", "Tokens of upstream calls by model and kind.",
            ["model", "kind"], registry=r)
        self.upstream_errors = Counter(
            "chatgate_upstream_errors",
            "Turns failed by the upstream, by error code and the server's HTTP status.",
            ["code", "http_status"], registry=r)
        self.refusals = Counter(
            "chatgate_refusals", "Turn requests refused by the limits, by reason.",
            ["reason"], registry=r)
        self.streams_swept = Counter(
            "chatgate_streams_swept", "Streaming rows swept to interrupted, by reason.",
            ["reason"], registry=r)
        self.background_failures = Counter(
            "chatgate_background_failures", "Failed rounds of a background task.", ["task"],
            registry=r)
        self.checkpoint_writes = Counter(
            "chatgate_checkpoint_writes", "Partial stream texts written.", registry=r)
        self.database_unavailable = Counter(
            "chatgate_database_unavailable",
            "Requests answered 503 because the database could not be reached.", registry=r)
        self.streams_revoked = Counter(
            "chatgate_streams_revoked", "Open SSE streams ended because their key was revoked.",
            registry=r)
        self.turns_stopped = Counter(
            "chatgate_turns_stopped",
            "Running turns ended before their answer did, by reason (client_gone, "
            "stop_request, key_revoked, shutting_down).", ["reason"], registry=r)
        self.loop_lag = Gauge(
            "chatgate_event_loop_lag_seconds",
            "How late the event loop ran a timer at its last probe.", registry=r,
            multiprocess_mode="livemax")
        self.waiting_to_open = Gauge(
            "chatgate_turns_waiting_to_open",
            "Turns waiting in line for a place among the turns opening at once.", registry=r,
            multiprocess_mode="livesum")
        self.chunks_held = Counter(
            "chatgate_chunks_held",
            "Chunks of streaming turns that waited for opening turns (saturated loop).",
            registry=r)
        self.resumes = Counter(
            "chatgate_stream_resumes",
            "Resume requests by outcome (local, shared, stored, or the refusal's code).",
            ["outcome"], registry=r)

        self.server_requests = Counter(
            "chatgate_model_server_requests", "Requests sent to each model server.",
            ["server"], registry=r)
        self.server_failures = Counter(
            "chatgate_model_server_failures", "Failed requests to each model server, by code.",
            ["server", "code"], registry=r)
        self.server_cooldown = Gauge(
            "chatgate_model_server_cooldown_until",
            "Unix time until which a model server cools down (0: healthy).", ["server"],
            registry=r, multiprocess_mode="livemax")
        self.fallbacks = Counter(
            "chatgate_model_fallbacks", "Answers moved to the next model before any token.",
            ["from_model", "to_model"], registry=r)
        self.continuations = Counter(
            "chatgate_model_continuations",
            "Answers continued by another call after a mid-answer failure.",
            ["from_model", "to_model"], registry=r)

    # The model router's report (app.upstream.router.RouterReport).
    def server_request(self, server: str) -> None:
        self.server_requests.labels(server).inc()

    def server_failure(self, server: str, code: str) -> None:
        self.server_failures.labels(server, code).inc()

    def server_cooling(self, server: str, until_unix: float) -> None:
        self.server_cooldown.labels(server).set(until_unix)

    def fallback(self, from_model: str, to_model: str) -> None:
        self.fallbacks.labels(from_model, to_model).inc()

    def continuation(self, from_model: str, to_model: str) -> None:
        self.continuations.labels(from_model, to_model).inc()

    def exposition(self) -> bytes:
        """The Prometheus text format: this process's registry, or every process's values
        in multiprocess mode."""
        if self.multiproc_dir is None:
            return generate_latest(self.registry)
        merged = CollectorRegistry()
        prom_multiprocess.MultiProcessCollector(  # type: ignore[no-untyped-call]
            merged, path=self.multiproc_dir)
        return generate_latest(merged)

    def process_exiting(self) -> None:
        """Multiprocess mode: drop this process's live gauges (its streams are over)."""
        if self.multiproc_dir is not None:
            prom_multiprocess.mark_process_dead(  # type: ignore[no-untyped-call]
                os.getpid(), self.multiproc_dir)


def gateway_overhead_s(
    started: float, now: float, now_wall: datetime.datetime,
    calls: Sequence[tuple[datetime.datetime, datetime.datetime]],
) -> float:
    """Time the turn spent in the gateway rather than waiting on the upstream.

    The turn's wall time, from the Turn's creation (just after the opening transaction
    committed) to its finishing transaction's commit, minus the union of its upstream calls'
    intervals (title/summary calls and the main call, from sending the request to closing
    the stream; overlapping calls are counted once). What remains: observers before the
    main call apart from their upstream calls, building MSG_CONTEXT, closing the stream and
    the finishing transaction. The per-chunk work (filter, SSE write) happens inside the
    main call's interval and is not in it; scripts/bench_filter.py measures that part.
    `started`/`now` are time.monotonic() values; calls are wall-clock datetimes."""
    elapsed = max(0.0, now - started)
    turn_start = now_wall - datetime.timedelta(seconds=elapsed)
    spans = sorted((max(a, turn_start), min(b, now_wall)) for a, b in calls)
    upstream = 0.0
    cursor = turn_start
    for begin, end in spans:
        begin = max(begin, cursor)
        if end > begin:
            upstream += (end - begin).total_seconds()
            cursor = end
    return max(0.0, elapsed - upstream)
