"""A model server on loopback for the OpenAI-compatible tests: it answers each request with
the streamed body a test prepared for it, found by a `[case:<id>]` tag in the request's last
message, and keeps every request it got. It runs on the session's server loop (not the test's),
so a synchronous client blocking the test's thread still gets its answer."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Sequence
from typing import Any

from tests.support.gateway import server_loop
from tests.support.scripted_upstream import (
    completion_chunk,
    finish_chunk,
    read_request,
    usage_chunk,
)

TAG = re.compile(r"\[case:([\w.-]+)\]")


def chunk(choices: list[dict[str, Any]], model: str = "scripted-1") -> str:
    return json.dumps({"id": "scripted", "object": "chat.completion.chunk", "created": 0,
                       "model": model, "choices": choices})


def answer_body(pieces: Sequence[str], *, usage: tuple[int, int] | None = (11, 7),
                finish: str = "stop") -> bytes:
    events = [completion_chunk(piece) for piece in pieces] + [finish_chunk(finish)]
    if usage is not None:
        events.append(usage_chunk(usage[0], usage[1], sum(usage)))
    return ("".join(f"data: {e}\n\n" for e in events) + "data: [DONE]\n\n").encode()


def raw_body(events: Sequence[str]) -> bytes:
    return ("".join(f"data: {e}\n\n" for e in events) + "data: [DONE]\n\n").encode()


class ModelServer:
    def __init__(self) -> None:
        self.bodies: dict[str, bytes] = {}
        #: Seconds between the events of a body, by key (others are sent at once).
        self.paces: dict[str, float] = {}
        self.requests: list[dict[str, Any]] = []
        self._server: asyncio.Server | None = None
        self.base_url = ""

    def start(self) -> ModelServer:
        self._server = server_loop().run(
            asyncio.start_server(self._answer, "127.0.0.1", 0))
        port = self._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    def stop(self) -> None:
        server = self._server
        if server is not None:
            async def close() -> None:
                server.close()
                await server.wait_closed()

            server_loop().run(close())

    def requests_for(self, key: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if _key(r) == key]

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _, body = await read_request(reader)
        request = json.loads(body) if body else {}
        self.requests.append(request)
        key = _key(request)
        if any(m.get("role") == "tool" for m in request.get("messages", [])):
            key = f"{key}.after-tool"
        body = self.bodies.get(key or "", answer_body(["no answer prepared"]))
        head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"content-length: " + str(len(body)).encode() + b"\r\n"
                b"connection: close\r\n\r\n")
        pace = self.paces.get(key or "")
        if pace is None:
            writer.write(head + body)
        else:
            writer.write(head)
            for event in body.split(b"\n\n")[:-1]:
                writer.write(event + b"\n\n")
                await writer.drain()
                await asyncio.sleep(pace)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()


def _key(request: dict[str, Any]) -> str | None:
    users = [m for m in request.get("messages", []) if m.get("role") == "user"]
    if not users:
        return None
    content = users[-1].get("content")
    text = content if isinstance(content, str) else json.dumps(content)
    # the last tag: the user's own text follows the MSG_CONTEXT, whose history may hold
    # the tags of earlier turns
    found = TAG.findall(text or "")
    return str(found[-1]) if found else None
