"""The Starlette application factory. The lifespan owns the database, the one shared
httpx.AsyncClient under the AsyncOpenAI client, and the background tasks; it refuses to start
when the store's integrity check fails."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware

from app.answer.interruptions import STALE_STREAMING
from app.answer.pricing import ModelPrice, PriceTable, load_price_table
from app.api.errors import (
    ApiError,
    api_error_handler,
    database_unavailable_handler,
    http_exception_handler,
    unhandled_error_handler,
)
from app.api.middleware import RequestContextMiddleware
from app.config.catalog import Catalog, ModelsFileError, ModelSpec
from app.config.database_urls import runs_postgres
from app.config.models_file import LoadedCatalog, load_catalog
from app.config.settings import Settings, get_settings
from app.events.bus import MessageBus, make_message_bus
from app.followups.recall import MemoryRecall
from app.followups.scheduler import FollowupScheduler
from app.followups.thread_settings import default_autonomy
from app.gateway.followups import start_autonomy, stop_autonomy
from app.gateway.routes import api_routes
from app.gateway.runtime import Runtime
from app.gateway.startup import ConfigError
from app.keys.rate_windows import DatabaseRateWindows, RateWindows, RedisRateWindows
from app.keys.revocation import RevocationWatcher
from app.kit.periodic import every
from app.kit.shield import drain_shielded
from app.kit.shutdown import on_stop_signals
from app.observe.logging import configure_logging, get_logger
from app.observe.metrics import GatewayMetrics
from app.observe.redaction import SECRETS
from app.process.heap import (
    TRIM_INTERVAL_S,
    can_return_free_memory,
    freeze_startup_heap,
    return_free_memory,
    space_out_collections,
)
from app.process.service import ProcessRegistry
from app.store.db import Database, DatabaseTimeouts
from app.store.errors import DatabaseUnavailable
from app.turn.admission.gate import TurnGate
from app.turn.deps import TurnDeps
from app.turn.holds.checkpoints import Checkpointer
from app.turn.holds.opening_places import OpeningPlaces
from app.turn.holds.precedence import Precedence
from app.turn.holds.slots import UpstreamSlots
from app.turn.native.resume import TurnResumes
from app.turn.native.runs import TurnRuns
from app.turn.native.share import SharedTurns
from app.turn.observers.announcer import MessageAnnouncer
from app.turn.observers.seam import TurnObserver
from app.turn.observers.stages.side_call import SideCaller
from app.turn.observers.stages.summary import SummaryStage
from app.turn.observers.stages.title import TitleStage
from app.turn.observers.tracing import StreamTracer
from app.turn.observers.turn_metrics import MetricsObserver
from app.turn.rows import integrity
from app.turn.rows import messages as message_store
from app.upstream import UpstreamClient, UpstreamConfig, make_http_client, make_openai_client
from app.upstream.router import ModelRouter
from app.usage.refusals import RefusalTally
from app.web import web_routes

log = get_logger("main")

#: How long shutdown waits for turns that are still being stored.
SHUTDOWN_DRAIN_S = 10.0


async def sweep_stale_streaming(db: Database, older_than_s: float,
                                metrics: GatewayMetrics | None = None) -> int:
    """Rows no process claims (written before processes had ids) left `streaming` too long
    become `interrupted`. A row a process claims is swept only once that process is dead
    (app.process), never while it streams: a live answer ends by `max_answer_s`."""
    async with db.transaction() as session:
        count = await message_store.interrupt_stale_streaming(
            session, datetime.timedelta(seconds=older_than_s)
        )
    if count:
        log.warning("stale_streaming_interrupted", count=count, older_than_s=older_than_s)
        if metrics is not None:
            metrics.streams_swept.labels(STALE_STREAMING).inc(count)
    return count


def sweep_interval_s(older_than_s: float) -> float:
    """Often enough that a row left `streaming` (a peer process died, or a finish could not
    be stored through a database outage) is freed soon after it turns stale; rarely enough
    to cost nothing."""
    return min(60.0, max(5.0, older_than_s / 4))


async def sweep_stale_streaming_forever(db: Database, older_than_s: float,
                                        metrics: GatewayMetrics | None = None) -> None:
    """The start-up sweep, repeated while the process runs."""
    await every(sweep_interval_s(older_than_s),
                lambda: sweep_stale_streaming(db, older_than_s, metrics),
                task="stale_sweep", metrics=metrics)


#: How often a SQLite gateway copies its write-ahead log into the database file.
LOG_MERGE_INTERVAL_S = 1.0


async def merge_sqlite_log_forever(db: Database, metrics: GatewayMetrics | None) -> None:
    """The log merged off the event loop (Database.merge_sqlite_log) every
    LOG_MERGE_INTERVAL_S: the gateway's commits merge none."""
    await every(LOG_MERGE_INTERVAL_S, db.merge_sqlite_log, task="sqlite_log_merge",
                metrics=metrics)


async def return_free_memory_forever() -> None:
    """Freed memory back to the system every TRIM_INTERVAL_S (app.process.heap.return_free_memory):
    a burst's memory leaves with it instead of staying resident at its peak."""

    async def trim() -> None:
        return_free_memory()

    await every(TRIM_INTERVAL_S, trim, task="heap_trim", metrics=None)


async def start_crash_recovery(rt: Runtime) -> None:
    """Register this process, sweep what dead processes left `streaming`, then keep beating,
    sweeping and checkpointing in the background (docs/production.md: crash recovery)."""
    settings = rt.settings
    await rt.processes.register()
    await rt.processes.sweep()
    await sweep_stale_streaming(rt.db, settings.stale_streaming_after_s, rt.metrics)
    rt.background.start("heartbeat", rt.processes.run_forever)
    rt.background.start("fence", rt.processes.watch_lease)
    rt.background.start("checkpoints", rt.checkpoints.run_forever)
    rt.background.start("stale_sweep", lambda: sweep_stale_streaming_forever(
        rt.db, settings.stale_streaming_after_s, rt.metrics))


async def leave_process_table(rt: Runtime) -> None:
    """After the drain: a process that stopped cleanly is not waited for by the others."""
    try:
        await rt.processes.unregister()
    except Exception as exc:  # its heartbeat then simply ages out
        log.warning("process_unregister_failed", error=type(exc).__name__)


async def flush_refusals(rt: Runtime) -> None:
    """The refusals counted since the last flush, written before the process leaves."""
    if rt.gate.refusals is None:
        return
    try:
        await rt.gate.refusals.flush()
    except Exception as exc:  # the database may be down: those counts are lost, logged
        log.warning("refusal_flush_failed", error=type(exc).__name__,
                    refusals=rt.gate.refusals.pending)


def begin_shutdown(rt: Runtime) -> None:
    """The process was told to stop: its turns are stopped and stored, and every open
    stream ends now with a last event (a turn's `message_end`, reason `shutting_down`),
    before the server waits for the connections to close (app.kit.shutdown)."""
    rt.runs.shut_down()
    rt.shutdown.begin()


def _warn_unknown_model_price(model: str) -> None:
    """Once per model: its calls are stored with cost_usd null (unknown is not zero)."""
    log.warning("unknown_model_price", model=model)


#: A transaction of the gateway's left idle this many statement timeouts is its process's,
#: cut off before its COMMIT: none of the gateway's transactions waits on anything but the
#: database between its statements.
IDLE_TRANSACTION_STATEMENTS = 3


def database_timeouts(settings: Settings) -> DatabaseTimeouts:
    """The operator's bounds on every wait for the database (the store reads no settings)."""
    statement_s = settings.database_statement_timeout_s
    return DatabaseTimeouts(connect_s=settings.database_connect_timeout_s,
                            statement_s=statement_s, pool_s=settings.database_pool_timeout_s,
                            idle_in_transaction_s=IDLE_TRANSACTION_STATEMENTS * statement_s)


def fence_after(settings: Settings) -> float | None:
    """The self-fence bound on PostgreSQL, a server shared over a network by processes that
    sweep each other's answers (app.config.fencing); none on SQLite, a local file."""
    if not runs_postgres(settings.database_url):
        return None
    return settings.process_fence_after_s


def postgres_pool(settings: Settings) -> dict[str, Any]:
    """The pool's overflow on PostgreSQL (SQLite's pool is the store's own choice), and
    whether a transaction pooler stands in front of it."""
    if not runs_postgres(settings.database_url):
        return {}
    return {"max_overflow": settings.database_max_overflow,
            "transaction_pooler": settings.database_pooler != "none"}


def build_runtime(settings: Settings, loaded: LoadedCatalog | None = None) -> Runtime:
    loaded = loaded or load_catalog(settings)
    catalog = loaded.catalog
    prices = with_model_prices(
        load_price_table(settings.price_file, on_unknown=_warn_unknown_model_price), catalog)
    db = Database(settings.database_url, sqlite_busy_timeout_s=settings.sqlite_busy_timeout_s,
                  sqlite_merge_on_commit=False, postgres_pool_size=settings.database_pool_size,
                  timeouts=database_timeouts(settings), **postgres_pool(settings))
    http = make_http_client(upstream_config(settings))
    clients = {spec.name: model_client(settings, spec, loaded.keys[spec.server.name], http)
               for spec in catalog.models}
    upstream = clients[catalog.default]  # the side calls' (title, summary)
    client = upstream.openai
    metrics = GatewayMetrics()
    bus = make_message_bus(db, listen_url=settings.database_listen_url,
                           redis_url=settings.redis_url, redis_prefix=settings.redis_prefix,
                           timeouts=database_timeouts(settings))
    router = ModelRouter(catalog, clients, report=metrics)
    observers = turn_observers(settings, db, upstream, prices, metrics, bus)
    slots = UpstreamSlots(settings.upstream_pool_size, settings.upstream_slot_timeout_s)
    processes = ProcessRegistry(db, heartbeat_s=settings.heartbeat_s,
                                dead_after_s=settings.process_dead_after_s,
                                fence_after_s=fence_after(settings), metrics=metrics)
    checkpoints = Checkpointer(db, settings.checkpoint_interval_s, metrics)
    deps = TurnDeps(db=db, upstream=upstream, prices=prices, settings=settings,
                    observers=observers, slots=slots, process_id=processes.process_id,
                    checkpoints=checkpoints, precedence=Precedence(metrics=metrics),
                    openings=OpeningPlaces(settings.max_opening_turns, settings.opening_wait_s,
                                           metrics), router=router)
    gate = TurnGate(deps, metrics, rate_windows(settings, db),
                    refusals=RefusalTally(db, metrics=metrics))
    runs = turn_runs(settings, metrics)
    processes.on_fenced, processes.on_unfenced = deps.running.fence, deps.running.unfence
    return Runtime(settings=settings, db=db, http=http, openai=client, upstream=upstream,
                   turn_deps=deps, bus=bus, gate=gate, processes=processes,
                   checkpoints=checkpoints,
                   revocations=RevocationWatcher(db, settings.revocation_check_s, metrics),
                   runs=runs, resumes=TurnResumes(db, runs, metrics), metrics=metrics)


def turn_runs(settings: Settings, metrics: GatewayMetrics) -> TurnRuns:
    """Turn logs in this process, mirrored in Redis when configured (a client then resumes
    on any process, and a Stop reaches the turn from any process); without Redis, a resume
    must reach the process that runs the turn."""
    shared = None
    if settings.redis_url:
        shared = SharedTurns(settings.redis_url, prefix=settings.redis_prefix,
                             keep_s=settings.resume_log_keep_s,
                             max_events=settings.resume_log_max_events)
    return TurnRuns(grace_s=settings.resume_grace_s, keep_s=settings.resume_log_keep_s,
                    max_events=settings.resume_log_max_events, shared=shared, metrics=metrics)


def rate_windows(settings: Settings, db: Database) -> RateWindows:
    """Redis when configured, else the database (the single-process default needs nothing
    but SQLite)."""
    if settings.redis_url:
        return RedisRateWindows(settings.redis_url, prefix=f"{settings.redis_prefix}:rate")
    return DatabaseRateWindows(db)


def upstream_config(settings: Settings) -> UpstreamConfig:
    return UpstreamConfig(
        base_url=settings.upstream_base_url, api_key=settings.upstream_api_key,
        model=settings.upstream_model, temperature=settings.upstream_temperature,
        max_tokens=settings.upstream_max_tokens,
        connect_timeout_s=settings.upstream_connect_timeout_s,
        read_timeout_s=settings.upstream_read_timeout_s,
        first_token_timeout_s=settings.first_token_timeout_s,
        max_retries=settings.upstream_max_retries, pool_size=settings.upstream_pool_size,
        max_answer_s=settings.max_answer_s)


def model_client(settings: Settings, spec: ModelSpec, api_key: str,
                 http: httpx.AsyncClient) -> UpstreamClient:
    """One model's client over the shared HTTP pool: its server, key and limits."""
    config = UpstreamConfig(
        base_url=spec.server.base_url, api_key=api_key, model=spec.model_id,
        temperature=spec.temperature, max_tokens=spec.max_tokens,
        connect_timeout_s=spec.connect_timeout_s, read_timeout_s=spec.read_timeout_s,
        first_token_timeout_s=spec.first_token_timeout_s, max_retries=spec.max_retries,
        pool_size=settings.upstream_pool_size, max_answer_s=spec.max_answer_s)
    return UpstreamClient(make_openai_client(config, http), config, http)


def with_model_prices(prices: PriceTable, catalog: Catalog) -> PriceTable:
    """The models file's prices over the price table's, by the id the server is asked
    for (what a call's record names) and by the model's own name."""
    extra = {key: ModelPrice(*spec.prices) for spec in catalog.models if spec.prices
             for key in (spec.model_id, spec.name)}
    return prices.with_prices(extra) if extra else prices


def turn_observers(
    settings: Settings, db: Database, upstream: UpstreamClient, prices: PriceTable,
    metrics: GatewayMetrics, bus: MessageBus,
) -> list[TurnObserver]:
    """Every observer of a turn, in the order its hooks run: metrics first (it times the turn
    right after the commit), traces, then the stages before the main call (the title, the
    summary, then memory recall, which queries with the new summary), follow-up scheduling,
    and last the announcement of the stored messages."""
    side_calls = SideCaller(upstream, prices, settings.side_call_timeout_s)
    observers: list[TurnObserver] = [MetricsObserver(metrics)]
    if settings.trace_streams != "off":
        observers.append(StreamTracer(settings.trace_streams))
    observers += [
        TitleStage(settings, side_calls),
        SummaryStage(settings, db, side_calls),
        MemoryRecall(db, settings),
        FollowupScheduler(default_autonomy(settings)),
        MessageAnnouncer(bus),
    ]
    return observers


class UpstreamNotConfigured(RuntimeError):
    """No model server URL: the OpenAI SDK would quietly fall back to api.openai.com and send
    every thread's history there, so the gateway refuses to start instead."""


def require_catalog(settings: Settings) -> LoadedCatalog:
    """The catalog, or one sentence (ConfigError: exit 2 under scripts/serve) and no
    start."""
    try:
        return load_catalog(settings)
    except ModelsFileError as exc:
        log.error("models_file_invalid", error=str(exc))
        raise ConfigError(f"CHATGATE_MODELS_FILE: {exc}") from None


def require_upstream(settings: Settings) -> None:
    if settings.models_file:
        return
    if not settings.upstream_base_url:
        log.error("upstream_not_configured")
        raise UpstreamNotConfigured(
            "CHATGATE_UPSTREAM_BASE_URL is not set: point it at an OpenAI-compatible server "
            "(https://api.openai.com/v1 for OpenAI); scripts/serve starts the built-in demo "
            "model server when it is missing"
        )


def create_app(settings: Settings | None = None) -> Starlette:
    """Build the gateway application (settings default to the environment's)."""
    settings = settings or get_settings()
    configure_logging(settings.log_level, settings.log_format)
    require_upstream(settings)
    loaded = require_catalog(settings)
    SECRETS.know(*loaded.secrets(settings))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        rt = build_runtime(settings, loaded)
        undo_signals = on_stop_signals(lambda: begin_shutdown(rt))
        try:
            await integrity.check_synthetic_roundtrip(rt.db)
            await start_crash_recovery(rt)
            if rt.db.has_write_ahead_log:
                rt.background.start("sqlite_log_merge",
                                    lambda: merge_sqlite_log_forever(rt.db, rt.metrics))
            rt.background.start("revocations", rt.revocations.run_forever)
            if rt.gate.refusals is not None:
                rt.background.start("refusal_flush", rt.gate.refusals.run_forever)
            if rt.turn_deps.precedence is not None:
                rt.background.start("loop_lag", rt.turn_deps.precedence.watch)
            if rt.runs.shared is not None:
                rt.background.start("turn_stops", rt.runs.listen_for_stops)
            app.state.runtime = rt
            app.state.autonomy = await start_autonomy(rt)  # the message bus, follow-ups
            freeze_startup_heap()
            space_out_collections()
            if can_return_free_memory():  # not on musl or macOS: no task waking for nothing
                rt.background.start("heap_trim", return_free_memory_forever)
            log.info("gateway_started", upstream=settings.upstream_base_url,
                     model=loaded.catalog.default, models=loaded.catalog.listed,
                     servers=[s.name for s in loaded.catalog.servers],
                     auth_mode=settings.auth_mode,
                     database=rt.db.backend)
            yield
        finally:
            undo_signals()
            begin_shutdown(rt)  # when no signal began it (an embedding server, a test)
            await rt.runs.close()  # running turns are stopped and stored
            await rt.background.stop()
            await drain_shielded(SHUTDOWN_DRAIN_S)
            await flush_refusals(rt)
            await leave_process_table(rt)
            if getattr(app.state, "autonomy", None) is not None:
                await stop_autonomy(app.state.autonomy)
            await rt.http.aclose()
            await rt.gate.windows.aclose()
            await rt.db.dispose()
            rt.metrics.process_exiting()
            log.info("gateway_stopped")

    return Starlette(
        routes=[*api_routes(), *web_routes()],
        middleware=[Middleware(RequestContextMiddleware)],
        exception_handlers={
            ApiError: api_error_handler,
            DatabaseUnavailable: database_unavailable_handler,
            HTTPException: http_exception_handler,
            Exception: unhandled_error_handler,
        },
        lifespan=lifespan,
    )
