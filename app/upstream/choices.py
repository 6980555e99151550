"""A streamed completion read choice by choice, for the OpenAI-compatible endpoint: each
choice's text, its tool call deltas (passed on untouched) and its finish reason, where the
native turn reads choice 0 of the same parse (app.upstream.wire.parse_choice_chunk, the one
reading of a chunk). Same reading of the body (app.upstream.wire.sse_data), same checks,
same failures."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

from app.turns.choices import ChoiceChunk
from app.upstream.client import UpstreamClient, UpstreamStream
from app.upstream.wire import parse_choice_chunk

__all__ = ["ChoiceStream", "open_choice_stream", "parse_choice_chunk"]


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
