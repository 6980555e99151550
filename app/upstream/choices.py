"""A streamed completion read choice by choice, for the OpenAI-compatible endpoint: each
choice's text, its tool call deltas (passed on untouched) and its finish reason, where the
native turn reads one text (app.upstream.wire.parse_chunk). Same reading of the body
(app.upstream.wire.sse_data), same checks, same failures."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

from app.turns.choices import ChoiceChunk, ChoicePiece, check_index
from app.upstream.client import UpstreamClient, UpstreamStream
from app.upstream.wire import (
    bad_response,
    chunk_choices,
    model_name,
    usage_of,
)


def parse_choice_chunk(obj: Any) -> ChoiceChunk:
    """One chat.completion.chunk, every choice kept apart. Raises UpstreamError like
    wire.parse_chunk."""
    choices = chunk_choices(obj)
    model = obj.get("model")
    return ChoiceChunk(pieces=tuple(_piece(choice) for choice in choices),
                       usage=usage_of(obj.get("usage")),
                       model=model_name(model if isinstance(model, str) else None))


def _piece(choice: Any) -> ChoicePiece:
    if not isinstance(choice, dict):
        raise bad_response("choice_not_object")
    index = choice.get("index", 0)
    if isinstance(index, bool) or not isinstance(index, int) or not check_index(index):
        raise bad_response("choice_index_invalid")
    delta = choice.get("delta") or {}
    if not isinstance(delta, dict):
        raise bad_response("delta_not_object")
    content = delta.get("content")
    if content is not None and not isinstance(content, str):
        raise bad_response("content_not_string")
    tool_calls = delta.get("tool_calls") or []
    if not isinstance(tool_calls, list) or not all(isinstance(c, dict) for c in tool_calls):
        raise bad_response("tool_calls_not_objects")
    finish = choice.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise bad_response("finish_reason_not_string")
    return ChoicePiece(index, content or "", tuple(tool_calls), finish or None)


class ChoiceStream(UpstreamStream):
    """An open streamed completion with choices: the native stream's reading, deadline and
    closing, each chunk read by `parse_choice_chunk`. Always `close()` (idempotent)."""

    def choice_chunks(self) -> AsyncGenerator[ChoiceChunk, None]:
        """Chunks until `data: [DONE]` or the body's end; the failures of
        UpstreamStream.chunks (a missed first token, a malformed chunk, a cut body)."""
        return self.read(parse_choice_chunk)


async def open_choice_stream(
    upstream: UpstreamClient, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]
) -> ChoiceStream:
    """Send a client's request; the first-token and answer deadlines start now."""
    deadline = time.monotonic() + upstream.first_token_timeout_s
    answer_deadline = upstream.answer_deadline()
    return ChoiceStream(await upstream.send_stream(messages, params), deadline, answer_deadline)
