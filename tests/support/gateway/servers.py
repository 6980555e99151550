"""In-process servers for tests: the gateway and the demo model server run inside the pytest
process instead of as uvicorn subprocesses, which cost seconds each to import and start.
(`serve_gateway`, at the end, is the exception: uvicorn in the test's own loop.)

One event loop, in a daemon thread, hosts every in-process server of the session (`ServerLoop`).
Not the test's loop: pytest-asyncio gives each test a loop of its own, while a module-wide
gateway (its database pool, httpx client, follow-up worker and message bus) must outlive one
test. And one loop, not one per server: `app.kit.shield` keeps a process-wide set of
shielded tasks that a gateway's shutdown drains, which only works when all of them belong to the
loop doing the draining (as they do in a gateway process).

Each server gets a `LogSink`. A context variable names the sink of whatever runs on behalf of a
server: it is set in the task that runs `uvicorn.Server.serve()`, so everything uvicorn and the
application start from there (connections, requests, the lifespan, its background tasks, shielded
work) inherits it. The application's logging is bound to `ROUTER` (see `build_gateway_app`),
which sends each line to the sink of the server that wrote it: a test reads exactly its
gateway's JSON lines, as it read a subprocess's log file.

A gateway is reached two ways, both talking to the app on the server loop: over a real loopback
socket (`url`, the uvicorn server: streams read as they arrive, disconnects, keep-alive), or
in memory through `httpx.ASGITransport` (`LoopAsgiTransport`), which buffers each response
whole and so suits every request whose answer is read to its end.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import io
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import httpx
import uvicorn
from starlette.applications import Starlette

from app.config.settings import Settings
from app.gateway.main import create_app

T = TypeVar("T")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


# -- log capture --------------------------------------------------------------------------


class LogSink:
    """The text one server wrote to stdout, kept in memory."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        with self._lock:
            self._parts.append(text)

    def text(self) -> str:
        with self._lock:
            return "".join(self._parts)


#: The sink of the server on whose behalf the current code runs (None: not a server's code).
CURRENT_SINK: contextvars.ContextVar[LogSink | None] = contextvars.ContextVar(
    "cg_test_log_sink", default=None)


class RoutingStream(io.TextIOBase):
    """A stdout stand-in that writes each line into the sink of the server that logged it.
    Anything written outside a server (no sink in the context) goes on to the real stdout of
    the moment, which pytest captures as usual."""

    def write(self, text: str) -> int:
        sink = CURRENT_SINK.get()
        if sink is not None:
            sink.write(text)
        else:
            target = sys.stdout if sys.stdout is not self else sys.__stdout__
            if target is not None:
                target.write(text)
        return len(text)

    def flush(self) -> None:
        """Sinks keep everything in memory: nothing to flush."""

    def writable(self) -> bool:
        return True


#: The one stdout every in-process gateway's logging is bound to.
ROUTER = RoutingStream()


# -- the server loop ----------------------------------------------------------------------


class ServerLoop:
    """An event loop running in a daemon thread; see the module docstring for why one."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="cg-test-servers", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T],
               sink: LogSink | None = None) -> concurrent.futures.Future[T]:
        """Start `coro` as a task on the loop, in a fresh context (nothing of the caller's
        structlog context leaks into a server) whose log sink is `sink`."""

        async def body() -> T:
            CURRENT_SINK.set(sink)
            return await coro

        async def run() -> T:
            # The inner task's context is empty but for the sink; cancelling `run` (the
            # caller gave up) cancels it too.
            return await asyncio.get_running_loop().create_task(
                body(), context=contextvars.Context())

        return asyncio.run_coroutine_threadsafe(run(), self.loop)

    def run(self, coro: Coroutine[Any, Any, T], sink: LogSink | None = None,
            timeout: float | None = STOP_TIMEOUT_S) -> T:
        """Run `coro` on the loop and wait for its result (from sync code)."""
        return self.submit(coro, sink).result(timeout)

    async def arun(self, coro: Coroutine[Any, Any, T], sink: LogSink | None = None) -> T:
        """Run `coro` on the loop and await its result from another loop (a test's);
        cancelling the caller cancels the task on the server loop too."""
        return await asyncio.wrap_future(self.submit(coro, sink))

    def close(self) -> None:
        """Stop the loop once every server is stopped, after cancelling what is left on it
        (sse-starlette's per-thread shutdown watcher polls forever)."""

        async def cancel_the_rest() -> None:
            current = asyncio.current_task()
            rest = [task for task in asyncio.all_tasks() if task is not current]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(cancel_the_rest(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()


_server_loop: ServerLoop | None = None
_server_loop_lock = threading.Lock()


def server_loop() -> ServerLoop:
    """The session's server loop, started on first use."""
    global _server_loop
    with _server_loop_lock:
        if _server_loop is None:
            _server_loop = ServerLoop()
        return _server_loop


def close_server_loop() -> None:
    """End of the session: stop the loop (every server on it is already stopped)."""
    global _server_loop
    with _server_loop_lock:
        if _server_loop is not None:
            _server_loop.close()
            _server_loop = None


# -- uvicorn on the server loop -----------------------------------------------------------


def bound_socket() -> socket.socket:
    """A listening-ready socket on 127.0.0.1 with a port the OS chose: bound before the
    server starts, so no other process can take the port in between.

    Made with its protocol named (IPPROTO_TCP): asyncio sets TCP_NODELAY only on connections
    whose socket says TCP, and a socket made with protocol 0 passes 0 on to every connection
    it accepts. Without TCP_NODELAY a response written in two parts (headers, then body)
    waits for the client's delayed ACK, 40 ms, on every request but a connection's first:
    what uvicorn avoids where it opens its own sockets."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def free_port() -> int:
    """A port the OS reports free on 127.0.0.1 (for a process to listen on, or for a server
    that is out of reach)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ServerFailed(RuntimeError):
    """An in-process server did not start: `exit_code` is the one uvicorn would have ended its
    process with (None when it never got that far), `log` what the server wrote."""

    def __init__(self, message: str, exit_code: int | None = None, log: str = "") -> None:
        super().__init__(f"{message}\n{log[-4000:]}" if log else message)
        self.exit_code = exit_code
        self.log = log


class InProcessServer:
    """An ASGI app served by uvicorn on the server loop, on a real loopback port."""

    def __init__(self, app: Any, sink: LogSink, *, lifespan: str = "on",
                 graceful_shutdown_s: float = 5.0) -> None:
        self.loop = server_loop()
        self.app = app
        self.sink = sink
        self._sock = bound_socket()
        port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        # log_config=None: uvicorn leaves handlers alone (the app's logging routes them) and
        # only sets its loggers to warning, as `uvicorn --log-level warning` did.
        self.server = uvicorn.Server(uvicorn.Config(
            app, lifespan=lifespan, log_level="warning", log_config=None,
            timeout_graceful_shutdown=graceful_shutdown_s))
        self._done = self.loop.submit(self._serve(), sink)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if self._done.done():
                self._sock.close()
                error = self._done.exception()
                exit_code = error.exit_code if isinstance(error, ServerFailed) else None
                raise ServerFailed(f"{self.url} did not start ({error!r})", exit_code,
                                   sink.text())
            if time.monotonic() > deadline:
                self.stop()
                raise ServerFailed(f"{self.url} not up after {START_TIMEOUT_S} s",
                                   log=sink.text())
            time.sleep(0.002)

    async def _serve(self) -> None:
        try:
            await self.server.serve(sockets=[self._sock])
        except SystemExit as exc:  # uvicorn's answer to a failed lifespan start-up
            code = exc.code if isinstance(exc.code, int) else 1
            raise ServerFailed(f"start-up failed (exit {code})", code) from None

    @property
    def running(self) -> bool:
        return not self._done.done()

    def stop(self) -> None:
        """Graceful stop, as on SIGTERM: connections close, the lifespan shuts down."""
        self.server.should_exit = True
        with contextlib.suppress(ServerFailed):
            self._done.result(STOP_TIMEOUT_S)
        self._sock.close()


class LoopAsgiTransport(httpx.AsyncBaseTransport):
    """`httpx.ASGITransport`, run on the server loop where the app's resources live. Like a
    server, an exception in the app becomes a 500 answer (raise_app_exceptions=False) rather
    than an exception in the test; the response arrives whole once the app has finished it."""

    def __init__(self, app: Any, sink: LogSink) -> None:
        self._asgi = httpx.ASGITransport(app=app, raise_app_exceptions=False,
                                         client=("127.0.0.1", 50000))
        self._sink = sink

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await server_loop().arun(self._asgi.handle_async_request(request), self._sink)


# -- gateway app ---------------------------------------------------------------------------


def build_gateway_app(settings: Settings) -> Starlette:
    """`create_app(settings)` with the process's logging bound to ROUTER: create_app
    configures structlog and the root logging handler on the stdout of the moment."""
    with contextlib.redirect_stdout(ROUTER):
        return create_app(settings)


# -- uvicorn in the test's own loop -------------------------------------------------------


@contextlib.asynccontextmanager
async def serve_gateway(settings: Settings) -> AsyncIterator[str]:
    """One gateway under a real uvicorn server on a loopback port, in the test's own event
    loop: its background tasks and the test share the loop (the test can reach its services),
    while clients still talk over a real socket. Yields the base URL; stopped after."""
    sock = bound_socket()
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(settings), log_level="warning",
                                           lifespan="on", timeout_graceful_shutdown=5))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(20):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 15)
        sock.close()
