"""httpx's requests to the model server carried by aiohttp.

httpx stays the gateway's client (its API, timeouts, cookies; the openai SDK's calls go
through it too); this transport only moves the bytes. httpcore parses each chunk of a
streamed answer's chunked body with h11, in Python, and hands it up through four generator
layers: at a hundred chunks a turn that was about a fifth of a turn's CPU. aiohttp parses
HTTP in C (llhttp), and a read here takes every byte that has come, however many chunks
that is. Its connection pool keeps idle connections by host in a dict, so thousands of
open streams cost no pool bookkeeping per request. The openai SDK offers the same pairing
(`DefaultAioHttpClient`) for clients under high concurrency.

Errors are httpx's, named as httpcore would name them (app.upstream.errors classifies
httpx's): a timeout while connecting is ConnectTimeout, a silence past the read timeout
ReadTimeout, a refused or failed connection (an untrusted certificate too) ConnectError, and
a server that closed before or during its answer RemoteProtocolError."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import aiohttp
import httpx

#: How long an idle connection is kept for the next turn (httpx's own default).
KEEPALIVE_S = 5.0


class AiohttpTransport(httpx.AsyncBaseTransport):
    """Connections kept alive between turns, with no limit of the transport's own: the
    gateway's upstream slots (app.turn.holds.slots) bound the turns that use the
    client, and a refused turn is told so at once. With aiohttp's limit set to the slots'
    count, 141 to 240 of 2,000 slow turns opened at once on SQLite failed as connect
    timeouts, against 2 without it. The session is made on the first request, inside the
    loop that uses it (aiohttp binds it to that loop)."""

    def __init__(self) -> None:
        self._tls: ssl.SSLContext = httpx.create_ssl_context()
        self._session: aiohttp.ClientSession | None = None

    def _opened(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ssl=self._tls,
                                             keepalive_timeout=KEEPALIVE_S)
            # httpx keeps the cookies and decodes the body: aiohttp does neither here.
            self._session = aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None))
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeout = request.extensions.get("timeout", {})
        with httpx_errors():
            response = await self._opened().request(
                request.method, str(request.url), headers=_headers(request),
                data=await _body(request), allow_redirects=False,
                skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent"),
                timeout=aiohttp.ClientTimeout(
                    total=None, connect=timeout.get("pool"),
                    sock_connect=timeout.get("connect"), sock_read=timeout.get("read")))
        return httpx.Response(
            status_code=response.status, headers=response.raw_headers,
            stream=ResponseBody(response), request=request,
            extensions={"http_version": b"HTTP/1.1",
                        "reason_phrase": (response.reason or "").encode("latin-1")})

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def _headers(request: httpx.Request) -> list[tuple[str, str]]:
    """httpx's headers as they are, but a chunked encoding: the body goes whole."""
    return [(name, value) for name, value in request.headers.multi_items()
            if name.lower() != "transfer-encoding"]


async def _body(request: httpx.Request) -> bytes | None:
    """The request's body, read from its stream without keeping it on the request: a
    streamed answer keeps its request for as long as it streams."""
    stream = request.stream
    assert isinstance(stream, httpx.AsyncByteStream), "an async client's request"
    return b"".join([part async for part in stream]) or None


class ResponseBody(httpx.AsyncByteStream):
    """An answer's body, each read taking all that has come. Closing it before its end
    drops the connection, which tells the model server to stop generating; a body read to
    its end has already given its connection back to the pool."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        content = self._response.content
        with httpx_errors():
            while block := await content.readany():
                yield block

    async def aclose(self) -> None:
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


@contextmanager
def httpx_errors() -> Iterator[None]:
    """aiohttp's errors raised as the httpx errors httpcore raises for the same failure."""
    try:
        yield
    except aiohttp.ConnectionTimeoutError as exc:
        raise httpx.ConnectTimeout(str(exc) or "timed out connecting") from exc
    except (aiohttp.SocketTimeoutError, aiohttp.ServerTimeoutError, TimeoutError) as exc:
        raise httpx.ReadTimeout(str(exc) or "timed out reading") from exc
    except aiohttp.ClientConnectorError as exc:
        raise httpx.ConnectError(str(exc)) from exc
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError,
            aiohttp.ClientResponseError) as exc:
        raise httpx.RemoteProtocolError(str(exc) or type(exc).__name__) from exc
    except aiohttp.InvalidURL as exc:
        raise httpx.UnsupportedProtocol(str(exc)) from exc
    except aiohttp.ClientError as exc:
        raise httpx.ReadError(str(exc) or type(exc).__name__) from exc
