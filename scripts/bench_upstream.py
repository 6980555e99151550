"""The benchmark's model server: a minimal OpenAI-compatible streaming endpoint on plain
asyncio, so that what it costs per turn is the floor a gateway is compared with.

`POST .../chat/completions` streams `tokens` one-token chunks (chunked transfer, keep-alive),
then a finish chunk, a usage chunk and `data: [DONE]`; `[tokens=N]` in the body asks for N
tokens instead (the linear-cost measurement). A request whose body contains `[slow]` sends a
token a second (the open-streams measurement holds those). `GET /healthz` is 200.

`pace_s` > 0 streams as a model does: each event is its own SSE event in its own HTTP chunk,
written and drained on its own (one send each), and the tokens `pace_s` apart on the event
loop's clock, so that a gateway reads, filters and writes one token at a time. The first
token follows the role chunk at once (the prefill is not modelled: it would add the same to
the direct and the proxied first delta). `pace_s` = 0 writes an answer's tokens back to back
without yielding, so that a reader gets many a read (the burst the benchmark first measured).

    .venv/bin/python scripts/bench_upstream.py PORT [--tokens 100] [--pace-ms 10]

is how scripts/bench_gateway.py and scripts/bench_openai.py start it; loopback only. It
imports nothing of the gateway's (its own process starts in a tenth of a second, not the
seconds of CPU that importing the gateway's packages takes, on the cores being measured).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import sys
from functools import partial
from pathlib import Path

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


async def _send(writer: asyncio.StreamWriter, data: bytes, paced: bool) -> None:
    """One event; paced, on the wire before the next is made (its own send)."""
    writer.write(data)
    if paced:
        await writer.drain()


async def _stream(writer: asyncio.StreamWriter, tokens: int, slow: bool, pace_s: float
                  ) -> None:
    paced = pace_s > 0
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                 b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n")
    await _send(writer, _chunk({"role": "assistant", "content": ""}), paced)
    for i in range(tokens):
        if i and (slow or paced):
            await asyncio.sleep(SLOW_TOKEN_S if slow else pace_s)
        writer.write(_chunk({"content": f"w{i} "}))
        await writer.drain()
    await _send(writer, _chunk({}, "stop"), paced)
    await _send(writer, _event({"id": "bench", "object": "chat.completion.chunk", "created": 0,
                                "model": "bench-1", "choices": [], "usage": {
                                    "prompt_tokens": 20, "completion_tokens": tokens,
                                    "total_tokens": 20 + tokens}}), paced)
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


async def _serve(tokens: int, pace_s: float, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
    try:
        while (request := await _request(reader)) is not None:
            path, body = request
            if path.endswith("/chat/completions"):
                asked = TOKENS_ASKED.search(body)
                await _stream(writer, int(asked.group(1)) if asked else tokens, b"[slow]" in body,
                              pace_s)
            else:
                status = b"200 OK" if path == "/healthz" else b"404 Not Found"
                writer.write(b"HTTP/1.1 " + status + b"\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def serve_upstream(port: int, tokens: int, pace_s: float = 0.0) -> None:
    server = await asyncio.start_server(partial(_serve, tokens, pace_s), "127.0.0.1", port,
                                        backlog=4096)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The benchmark's model server on 127.0.0.1.")
    parser.add_argument("port", type=int)
    parser.add_argument("--tokens", type=int, default=100, help="tokens an answer")
    parser.add_argument("--pace-ms", type=float, default=10.0,
                        help="time between two tokens (0: an answer's tokens back to back)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    # As the gateway does (app/process/heap.py): a full collection over the startup heap
    # would pause the streams and be charged to whichever turn it hit.
    from app.process.heap import freeze_startup_heap, space_out_collections

    freeze_startup_heap()
    space_out_collections()
    asyncio.run(serve_upstream(args.port, args.tokens, args.pace_ms / 1000))


if __name__ == "__main__":
    main()
