"""The benchmark's model server: a minimal OpenAI-compatible streaming endpoint on plain
asyncio, so that what it costs per turn is the floor a gateway is compared with.

`POST .../chat/completions` streams `tokens` one-token chunks (chunked transfer, keep-alive),
then a finish chunk, a usage chunk and `data: [DONE]`; `[tokens=N]` in the body asks for N
tokens instead (the linear-cost measurement). A request whose body contains `[slow]` sends a
token a second (the open-streams measurement holds those). `GET /healthz` is 200.
Run by scripts/bench_gateway.py as `--serve-upstream PORT`; loopback only.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from functools import partial

SLOW_TOKEN_S = 1.0
TOKENS_ASKED = re.compile(rb"\[tokens=(\d{1,5})\]")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _event(payload: dict[str, object] | str) -> bytes:
    """One SSE event as one HTTP chunk."""
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    line = f"data: {data}\n\n".encode()
    return b"%x\r\n%s\r\n" % (len(line), line)


def _chunk(delta: dict[str, str], finish: str | None = None) -> bytes:
    return _event({"id": "bench", "object": "chat.completion.chunk", "created": 0,
                   "model": "bench-1", "choices": [
                       {"index": 0, "delta": delta, "finish_reason": finish}]})


async def _stream(writer: asyncio.StreamWriter, tokens: int, slow: bool) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                 b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n")
    writer.write(_chunk({"role": "assistant", "content": ""}))
    for i in range(tokens):
        writer.write(_chunk({"content": f"w{i} "}))
        await writer.drain()
        if slow:
            await asyncio.sleep(SLOW_TOKEN_S)
    writer.write(_chunk({}, "stop"))
    writer.write(_event({"id": "bench", "object": "chat.completion.chunk", "created": 0,
                         "model": "bench-1", "choices": [], "usage": {
                             "prompt_tokens": 20, "completion_tokens": tokens,
                             "total_tokens": 20 + tokens}}))
    writer.write(_event("[DONE]") + b"0\r\n\r\n")
    await writer.drain()


async def _request(reader: asyncio.StreamReader) -> tuple[str, bytes] | None:
    """(path, body) of the next request on the connection, or None when it closed."""
    request_line = await reader.readline()
    if not request_line:
        return None
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return request_line.decode("latin-1").split(" ")[1], body


async def _serve(tokens: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 ) -> None:
    try:
        while (request := await _request(reader)) is not None:
            path, body = request
            if path.endswith("/chat/completions"):
                asked = TOKENS_ASKED.search(body)
                await _stream(writer, int(asked.group(1)) if asked else tokens, b"[slow]" in body)
            else:
                status = b"200 OK" if path == "/healthz" else b"404 Not Found"
                writer.write(b"HTTP/1.1 " + status + b"\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def serve_upstream(port: int, tokens: int) -> None:
    server = await asyncio.start_server(partial(_serve, tokens), "127.0.0.1", port,
                                        backlog=4096)
    async with server:
        await server.serve_forever()
