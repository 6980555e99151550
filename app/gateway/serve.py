"""What `scripts/serve` runs: migrate the database to head, start the demo model server on a
free loopback port when no upstream is configured (and say so), then run the gateway under
uvicorn (CHATGATE_WORKERS worker processes, PostgreSQL only above 1, each on a listening
socket of its own: app.gateway.workers). Auth is off when
binding to loopback unless CHATGATE_AUTH_MODE is set explicitly.

Everything an operator can get wrong is checked before anything says it is listening: the
settings, the workers' database, the port, the database itself. Each ends the start as one
sentence and exit 2 (app.gateway.startup). The application is imported only after the settings pass:
a wrong value is refused in a fraction of a second, not after two seconds of imports.

    python -m app.gateway.serve [--host 127.0.0.1] [--port 8000] [--demo-port 8001]
    python -m app.gateway.serve --prepare-only [--no-migrate] [--host 0.0.0.0] [--port 8000]
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from app.config.database_urls import one_process_at_a_time, redacted, runs_postgres
from app.config.settings import Settings
from app.gateway.startup import ConfigError, checked_settings, one_sentence_on_error
from app.observe.logging import configure_logging, get_logger

log = get_logger("serve")

DEMO_START_TIMEOUT_S = 20.0


def free_loopback_port() -> int:
    """A port the OS says is free on 127.0.0.1 (tiny race; fine for a dev helper)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def wait_until_up(
    url: str, timeout_s: float, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Poll `url` until it answers 200; fail early if the process died."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{url}: the process exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up within {timeout_s} s")


@contextmanager
def demo_model_server(port: int | None = None) -> Iterator[str]:
    """The demo model server as a child process (on `port`, else a free one); yields its
    OpenAI base URL. Its access log stays quiet: the gateway's console is the one to read."""
    port = port or free_loopback_port()
    child = subprocess.Popen(
        [sys.executable, "-m", "app.demo_llm", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning"]
    )
    try:
        wait_until_up(f"http://127.0.0.1:{port}/healthz", DEMO_START_TIMEOUT_S, child)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        child.terminate()
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            child.kill()


def effective_settings(base: Settings, host: str, upstream_url: str | None) -> Settings:
    """Auth off on loopback unless set explicitly; the demo server's URL when started: the
    one upstream's, or that of the models file's demo servers."""
    update: dict[str, object] = {}
    if "auth_mode" not in base.model_fields_set and "CHATGATE_AUTH_MODE" not in os.environ:
        update["auth_mode"] = "off" if is_loopback(host) else "keys"
    if upstream_url is not None:
        update["demo_base_url" if base.models_file else "upstream_base_url"] = upstream_url
    return base.model_copy(update=update)


def demo_wanted(settings: Settings) -> bool:
    """The demo model server is started: no model server is configured, or the models file
    names it (`base_url = "demo"`)."""
    if settings.models_file:
        from app.config.models_file import load_catalog

        return load_catalog(settings, place_demo=False).catalog.wants_demo
    return not settings.upstream_base_url


def check_demo_port(settings: Settings, demo_port: int | None) -> None:
    """--demo-port applies when the demo model server starts, and is refused with the
    reason when it does not (an option silently ignored reads as if it had worked)."""
    if demo_port is None:
        return
    if demo_wanted(settings):
        check_port_free("127.0.0.1", demo_port, "--demo-port")
        return
    why = ("the models file names no server with base_url = \"demo\"" if settings.models_file
           else "CHATGATE_UPSTREAM_BASE_URL is set")
    raise ConfigError(f"--demo-port {demo_port} does not apply: no demo model server starts, "
                      f"as {why}")


def warn_if_open_to_the_network(settings: Settings, host: str) -> bool:
    """Auth off beyond loopback makes anyone who reaches the port user `local`, an admin: it
    is allowed (a trusted network, a proxy that authenticates) but never silent."""
    if settings.auth_mode != "off" or is_loopback(host):
        return False
    log.warning("auth_off_beyond_loopback", host=host,
                message="CHATGATE_AUTH_MODE=off on a non-loopback address: every caller is "
                        "user 'local' with admin rights")
    return True


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    """uvicorn re-raises the signal it stopped on after its shutdown; turning SIGTERM into
    SystemExit lets our `finally` blocks stop the demo child instead of orphaning it."""
    raise SystemExit(128 + signum)


def prepare(host: str, port: int, demo_port: int | None = None, *,
            migrate_database: bool = True) -> Settings:
    """Everything an operator can get wrong, checked before anything says it is listening:
    the settings, the workers' database, the ports, the database itself (migrated to head).
    Each ends the process with one sentence and exit 2. The Docker entry point runs this
    alone (`--prepare-only`) before it starts uvicorn itself."""
    base = checked_settings()
    configure_logging(base.log_level, base.log_format)
    with one_sentence_on_error():
        check_workers(base.workers, base.database_url)
        check_port_free(host, port, "--port")
        check_models_file(base)
        check_demo_port(base, demo_port)
        if migrate_database:
            migrate(base.database_listen_url or base.database_url)
        check_connections_fit(base)
    return base


def check_connections_fit(settings: Settings) -> None:
    """On PostgreSQL, this host's workers' pools (each with its overflow and its LISTEN
    connection; behind a transaction pooler, the LISTEN connections alone) against what the
    server allows: a deployment that cannot fit is refused
    with one sentence naming the numbers and the fix (app.config.database_budget), instead of
    answering 503s once the load reaches the server's limit."""
    if not runs_postgres(settings.database_url):
        return
    from app.config.database_budget import ConnectionPlan, fit_problem
    from app.store.capacity import server_connections

    server = asyncio.run(server_connections(settings.database_listen_url
                                            or settings.database_url))
    plan = ConnectionPlan(workers=settings.workers, pool_size=settings.database_pool_size,
                          max_overflow=settings.database_max_overflow)
    if settings.database_pooler != "none":  # the pools are the pooler's clients
        plan = ConnectionPlan(workers=settings.workers, pool_size=0)
    problem = fit_problem(plan, server)
    if problem is not None:
        raise ConfigError(problem)
    log.info("database_connections_fit", workers=plan.workers, per_process=plan.per_process,
             total=plan.total, available=server.available)


def check_models_file(settings: Settings) -> None:
    """A models file that names a missing entry, a wrong field or an unset key variable is
    one sentence naming the entry and the field."""
    from app.config.catalog import ModelsFileError
    from app.config.models_file import load_catalog

    try:
        load_catalog(settings, place_demo=False)
    except ModelsFileError as exc:
        raise ConfigError(f"CHATGATE_MODELS_FILE: {exc}") from None


def run(host: str, port: int, demo_port: int | None = None) -> None:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    base = prepare(host, port, demo_port)
    import uvicorn

    from app.gateway.main import create_app

    with _upstream(base, demo_port) as upstream_url:
        settings = effective_settings(base, host, upstream_url)
        warn_if_open_to_the_network(settings, host)
        log.info("gateway_listening", url=f"http://{host}:{port}/", workers=settings.workers,
                 auth_mode=settings.auth_mode, upstream=settings.upstream_base_url)
        if settings.workers == 1:
            uvicorn.run(create_app(settings), host=host, port=port, log_config=None,
                        timeout_graceful_shutdown=5)
            return
        _export_for_workers(settings)
        from app.gateway.workers import serve_workers

        serve_workers(uvicorn.Config("app.gateway.main:create_app", factory=True,
                                     workers=settings.workers, host=host, port=port,
                                     log_config=None, timeout_graceful_shutdown=5))


def check_workers(workers: int, database_url: str) -> None:
    """Several workers need PostgreSQL. On SQLite every write of every worker queues on the
    one file lock, across processes by SQLite's sleeping busy handler (the workers add CPU
    but no write throughput), and the thread events bus is in-process: a page would miss the
    messages another worker stored. Refused with that sentence rather than run that way."""
    if workers > 1 and one_process_at_a_time(database_url):
        raise ConfigError(
            f"CHATGATE_WORKERS={workers} needs PostgreSQL (CHATGATE_DATABASE_URL="
            "postgresql+asyncpg://...): on SQLite all workers would queue on one write lock "
            "and miss each other's thread events; use 1 worker")


def check_port_free(host: str, port: int, option: str) -> None:
    """Bind the address as uvicorn will (SO_REUSEADDR) and let it go: a port another process
    listens on is refused here, before the database is migrated and the gateway says it is
    listening. (Another process may still take it in between: uvicorn then fails as before.)"""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as error:
            reason = error.strerror or str(error)
            if error.errno == errno.EADDRINUSE:
                reason = "another process listens there; stop it or choose another port"
            raise ConfigError(f"{option} {port} on {host} cannot be used: {reason}") from None


def _export_for_workers(settings: Settings) -> None:
    """Worker processes build their app from the environment: what this process decided
    (the demo upstream's URL, auth off on loopback) goes there, and the workers' metrics are
    merged (docs/production.md) in a directory emptied now."""
    os.environ["CHATGATE_AUTH_MODE"] = settings.auth_mode
    if settings.upstream_base_url:
        os.environ["CHATGATE_UPSTREAM_BASE_URL"] = settings.upstream_base_url
    if settings.demo_base_url:
        os.environ["CHATGATE_DEMO_BASE_URL"] = settings.demo_base_url
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        metrics_dir = Path(tempfile.mkdtemp(prefix="chatgate-prometheus-"))
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    else:
        metrics_dir = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
        metrics_dir.mkdir(parents=True, exist_ok=True)
        for stale in metrics_dir.iterdir():
            if stale.is_file():
                stale.unlink()


def migrate(database_url: str) -> None:
    """Bring the database to head, or raise the store's one-sentence error for a database
    that cannot be reached or does not exist: a wrong path or host is an operator's typo, not
    a stack trace to read."""
    from app.store.migrations import reached_or_raise, upgrade_to_head

    try:
        asyncio.run(upgrade_to_head(database_url))
    except Exception as error:
        reached_or_raise(database_url, error)
        raise
    log.info("database_migrated", database_url=redacted(database_url))


@contextmanager
def _upstream(settings: Settings, demo_port: int | None) -> Iterator[str | None]:
    if not demo_wanted(settings):
        yield None
        return
    why = ("The models file names the demo model server (base_url = \"demo\")"
           if settings.models_file else "No CHATGATE_UPSTREAM_BASE_URL set")
    with demo_model_server(demo_port) as url:
        log.warning(
            "demo_upstream_started",
            message=f"{why}: started the built-in demo model server at {url} and pointed "
                    "the gateway at it.",
            upstream=url,
        )
        yield url


def main(argv: list[str] | None = None, prog: str = "scripts/serve") -> None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--demo-port", type=int, default=None,
                        help="port of the demo model server (default: a free one)")
    parser.add_argument("--prepare-only", action="store_true",
                        help="check the settings, the port and the database, migrate it, and "
                             "exit (the Docker entry point, which runs uvicorn itself)")
    parser.add_argument("--no-migrate", action="store_true",
                        help="with --prepare-only: leave the schema alone")
    args = parser.parse_args(argv)
    if args.prepare_only:
        prepare(args.host, args.port, migrate_database=not args.no_migrate)
        return
    run(args.host, args.port, args.demo_port)


if __name__ == "__main__":
    main()
