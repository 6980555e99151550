"""The shape every background round of a gateway process shares (heartbeat, checkpoints,
revocation checks, the stale sweep): wait, run one round, and when the database is down log
one line and count it, then try again next round instead of dying."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from app.observe.logging import get_logger
from app.observe.metrics import GatewayMetrics

log = get_logger("services.periodic")


async def every(
    interval_s: float, run_round: Callable[[], Awaitable[object]], *, task: str,
    metrics: GatewayMetrics | None, log_fields: Callable[[], dict[str, object]] = dict,
) -> None:
    """`run_round` every `interval_s` until cancelled; a failed round is `<task>_failed`
    (with `log_fields()` of that moment) and one `chatgate_background_failures{task}`."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await run_round()
        except Exception as exc:  # the database may be down; the next round retries
            log.warning(f"{task}_failed", error=type(exc).__name__, **log_fields())
            if metrics is not None:
                metrics.background_failures.labels(task).inc()
