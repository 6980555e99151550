"""A model server on loopback that answers every request with a fixed SSE body: for outputs
the demo server cannot produce (bytes a real model or a broken proxy may send)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager


def completion_chunk(text: str, model: str = "scripted-1") -> str:
    """One OpenAI chat.completion.chunk carrying `text`, as JSON."""
    return json.dumps({
        "id": "scripted", "object": "chat.completion.chunk", "created": 0, "model": model,
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    })


def usage_chunk(prompt: int, completion: int, total: int, model: str = "scripted-1") -> str:
    """The closing chunk of `include_usage`: no choices, the usage."""
    return json.dumps({
        "id": "scripted", "object": "chat.completion.chunk", "created": 0, "model": model,
        "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                 "total_tokens": total},
    })


def sse_body(texts: Sequence[str], *, tail: str = "data: [DONE]\n\n",
             model: str = "scripted-1") -> bytes:
    """A streamed answer made of `texts`, then `tail` (the end, or something broken)."""
    return ("".join(f"data: {completion_chunk(t, model)}\n\n" for t in texts) + tail).encode()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One HTTP/1.1 request off a connection: its head (request line and headers) and its
    body, `Content-Length` bytes of it."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    return head, await reader.readexactly(length)


@asynccontextmanager
async def scripted_upstream(body: bytes, *, status: str = "200 OK",
                            content_type: str = "text/event-stream",
                            headers: Mapping[str, str] | None = None) -> AsyncIterator[str]:
    """Serve `body` as the answer to every request (by default an event stream), with
    `headers` besides the content type; yields the base URL (…/v1)."""
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n{extra}".encode()
                     + b"content-length: " + str(len(body)).encode() + b"\r\n"
                     b"connection: close\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}/v1"


def finish_chunk(reason: str = "stop", model: str = "scripted-1") -> str:
    """The chunk that ends the answer: an empty delta with its finish_reason."""
    return json.dumps({
        "id": "scripted", "object": "chat.completion.chunk", "created": 0, "model": model,
        "choices": [{"index": 0, "delta": {}, "finish_reason": reason}],
    })
