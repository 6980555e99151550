"""Run cleanup that must finish even when the request is being cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import anyio

_running: set[asyncio.Task[Any]] = set()


async def run_shielded(work: Coroutine[Any, Any, None]) -> None:
    """Await `work` to completion despite cancellation.

    The anyio shield covers cancel scopes (sse-starlette cancels its task group when the
    client leaves); running the work as its own task under asyncio.shield covers a plain
    task.cancel() (server shutdown): then the caller stops waiting but the work still
    completes."""
    task = _start(work)
    with anyio.CancelScope(shield=True):
        await asyncio.shield(task)


def run_detached(work: Coroutine[Any, Any, None]) -> None:
    """Start `work` without waiting for it; waited for (bounded) by drain_shielded at shutdown
    like shielded work."""
    _start(work)


def _start(work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """`work` as a task, kept referenced until done so it cannot be garbage-collected."""
    task = asyncio.ensure_future(work)
    _running.add(task)
    task.add_done_callback(_running.discard)
    return task


async def drain_shielded(timeout_s: float) -> None:
    """Wait (bounded) for shielded work still running, e.g. at shutdown."""
    if _running:
        await asyncio.wait(list(_running), timeout=timeout_s)
