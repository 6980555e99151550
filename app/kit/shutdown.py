"""The process was told to stop: what must end before the server waits for its connections.

uvicorn, on SIGTERM (or SIGINT), stops accepting connections, then waits for the open ones
(`timeout_graceful_shutdown`), cancels what is left (an ERROR traceback per response), and
only then runs the application's lifespan shutdown. An answer streaming for minutes would
so be cut without a last event. The application hears of the signal first instead
(`on_stop_signals`, chained before the server's own handler), and its open streams end
themselves at once, each with a last event in its API's terms (`Shutdown.watch`)."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from app.observe.logging import get_logger

log = get_logger("kit.shutdown")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Shutdown:
    """Whether the process is shutting down, and who must hear of it when it starts."""

    def __init__(self) -> None:
        self.begun = False
        self._callbacks: set[Callable[[], None]] = set()

    @contextmanager
    def watch(self, callback: Callable[[], None]) -> Iterator[None]:
        """While open, `callback` is called once the shutdown begins (at once, soon, when
        it already has: a stream opened during the shutdown ends as soon as it starts)."""
        if self.begun:
            asyncio.get_running_loop().call_soon(callback)
        self._callbacks.add(callback)
        try:
            yield
        finally:
            self._callbacks.discard(callback)

    def begin(self) -> None:
        """Tell every watcher, once."""
        if self.begun:
            return
        self.begun = True
        callbacks, self._callbacks = list(self._callbacks), set()
        log.info("shutdown_begun", open_streams=len(callbacks))
        for callback in callbacks:
            callback()


def on_stop_signals(callback: Callable[[], None]) -> Callable[[], None]:
    """Call `callback` on the running loop when the process gets SIGTERM or SIGINT, then
    the handler that was there (the server's, which starts its own shutdown). Returns the
    undo. Only the main thread may set handlers: elsewhere (a server in a test's thread)
    this does nothing, and the shutdown begins with the lifespan's end instead."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def handle(sig: int, frame: FrameType | None) -> None:
        # A signal handler runs between two bytecodes of whatever the loop was doing: the
        # callback is only scheduled from here, never run.
        loop.call_soon_threadsafe(callback)
        before = previous[signal.Signals(sig)]
        if callable(before):
            before(sig, frame)
        elif before in (signal.SIG_DFL, None):  # no server to stop: what it did before us
            signal.signal(sig, signal.SIG_DFL)
            signal.raise_signal(sig)

    for sig in STOP_SIGNALS:
        signal.signal(sig, handle)

    def undo() -> None:
        for sig, before in previous.items():
            if signal.getsignal(sig) is handle:
                signal.signal(sig, _as_handler(before))

    return undo


def _as_handler(handler: Any) -> Any:
    """signal.getsignal may answer None (a handler not set from Python): the default then."""
    return signal.SIG_DFL if handler is None else handler
