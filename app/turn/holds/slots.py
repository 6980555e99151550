"""Upstream slots: how many turns of this process may use the model server at once.

The HTTP client's pool has `upstream_pool_size` connections. Without a bound in front of it, a
flood of turns queues inside the pool, and a turn that waited there too long failed as
`upstream_timeout`, blaming a model server it never reached. A turn therefore takes a slot
before anything is stored or sent (open_turn) and gives it back when it finishes; one that
cannot get one within `upstream_slot_timeout_s` is refused as `gateway_busy`.

A turn's title and summary calls run one after the other before its main call and take no
slot of their own: they ride on the turn's, so a turn uses at most one connection at a time
and can never wait on a slot it already holds."""

from __future__ import annotations

import asyncio
import math


class TurnRefused(Exception):
    """A turn the gateway will not run now: nothing was stored and nothing sent upstream.
    `status` is the HTTP status, `code` the API's error code, `retry_after_s` when trying
    again can succeed."""

    def __init__(self, status: int, code: str, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after_s = max(1, math.ceil(retry_after_s))


class GatewayBusy(TurnRefused):
    def __init__(self, retry_after_s: float) -> None:
        super().__init__(503, "gateway_busy",
                         "the gateway is busy with other answers; try again shortly",
                         retry_after_s)


class Slot:
    """One held slot; release() is idempotent (a turn may be finished from two places)."""

    def __init__(self, semaphore: asyncio.Semaphore) -> None:
        self._semaphore: asyncio.Semaphore | None = semaphore

    def release(self) -> None:
        if self._semaphore is not None:
            self._semaphore.release()
            self._semaphore = None


class UpstreamSlots:
    """`size` slots, waited for at most `timeout_s` (0: only a free one is taken)."""

    def __init__(self, size: int, timeout_s: float) -> None:
        self.size = size
        self.timeout_s = timeout_s
        self._semaphore = asyncio.Semaphore(size)

    @property
    def free(self) -> int:
        return self._semaphore._value

    async def acquire(self) -> Slot:
        """A slot, or GatewayBusy. Waiters are served in order (asyncio.Semaphore is FIFO)."""
        if self._semaphore.locked():
            if self.timeout_s <= 0:
                raise GatewayBusy(1.0)
            try:
                async with asyncio.timeout(self.timeout_s):
                    await self._semaphore.acquire()
            except TimeoutError:
                raise GatewayBusy(self.timeout_s) from None
        else:
            await self._semaphore.acquire()
        return Slot(self._semaphore)
