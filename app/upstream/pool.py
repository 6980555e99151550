"""The upstream connection pool, as several small httpcore pools.

httpcore's pool re-examines every one of its connections whenever a request starts or ends,
and, while it opens new connections, wakes every queued request for each one that frees up.
That bookkeeping grows with the square of the connections in one pool: with 500 streams
opening at once it cost a load generator on one pool about 14 ms of CPU per request more
than on twenty pools. Shards of a few dozen connections each keep it small. A turn holds an
upstream slot (app.services.upstream_slots) for as long as it holds a connection, so the
slots, not the shards, bound the connections in use. The connections themselves are the
loop's own transports (app.upstream.network), not anyio's streams."""

from __future__ import annotations

import math
import ssl
from collections.abc import AsyncIterator

import httpcore
import httpx

from app.upstream.network import AsyncioBackend

#: The requests in flight a shard takes before the next one is used.
CONNECTIONS_PER_SHARD = 25


class ShardedTransport(httpx.AsyncBaseTransport):
    """A request goes to the first shard with fewer than CONNECTIONS_PER_SHARD requests in
    flight (the least busy when none has), so a light load stays on the first shard and
    reuses its connections. Each shard may open up to `pool_size` connections, so a request
    never waits for a connection while the slots allow it one, and keeps up to
    CONNECTIONS_PER_SHARD of them alive when idle."""

    def __init__(self, pool_size: int) -> None:
        limits = httpx.Limits(max_connections=pool_size,
                              max_keepalive_connections=min(CONNECTIONS_PER_SHARD, pool_size))
        shards = max(1, math.ceil(pool_size / CONNECTIONS_PER_SHARD))
        # One TLS context for all: each would otherwise load the CA bundle again (about
        # 20 ms and a few hundred KB each, 80 times for 2,000 connections).
        tls: ssl.SSLContext = httpx.create_ssl_context()
        self._shards = [_shard(tls, limits) for _ in range(shards)]
        self._in_flight = [0] * shards

    def in_flight(self) -> list[int]:
        """Requests whose response is not closed yet, per shard."""
        return list(self._in_flight)

    def _pick(self) -> int:
        counts = self._in_flight
        for index, count in enumerate(counts):
            if count < CONNECTIONS_PER_SHARD:
                return index
        return counts.index(min(counts))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        index = self._pick()
        self._in_flight[index] += 1
        try:
            response = await self._shards[index].handle_async_request(request)
        except BaseException:
            self._in_flight[index] -= 1
            raise
        response.stream = _Counted(response.stream, self._in_flight, index)
        return response

    async def aclose(self) -> None:
        for shard in self._shards:
            await shard.aclose()


def _shard(tls: ssl.SSLContext, limits: httpx.Limits) -> httpx.AsyncHTTPTransport:
    """httpx's transport over an httpcore pool whose connections are asyncio's own
    (app.upstream.network). httpx takes no network backend, so its pool is replaced: the
    pool is what httpx would build for these arguments, but for the backend."""
    transport = httpx.AsyncHTTPTransport(verify=tls, limits=limits)
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=tls, max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry, network_backend=AsyncioBackend())
    return transport


class _Counted(httpx.AsyncByteStream):
    """A shard's response body; its first close takes it off the shard's count. Iterating
    hands out the shard's own iterator, so reading costs no extra step per chunk."""

    def __init__(self, stream: httpx.AsyncByteStream | httpx.SyncByteStream,
                 in_flight: list[int], index: int) -> None:
        assert isinstance(stream, httpx.AsyncByteStream)
        self._stream = stream
        self._in_flight = in_flight
        self._index: int | None = index

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._stream.__aiter__()

    async def aclose(self) -> None:
        index, self._index = self._index, None
        try:
            await self._stream.aclose()
        finally:
            if index is not None:
                self._in_flight[index] -= 1
