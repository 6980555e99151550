"""The model server's event stream read by hand: `data:` lines of an SSE body, each a
chat.completion.chunk decoded straight into a ChoiceChunk (every choice kept apart), of which
the native turn reads choice 0 as an UpstreamChunk: one parse, one set of checks.

Reading the bytes ourselves (instead of the openai SDK's AsyncStream) is what tells a clean
end (`data: [DONE]`, or a finish_reason) from a body that merely stopped, and it checks every
field the gateway uses, so an odd chunk fails the turn as `upstream_bad_response` instead of
a TypeError deep in the turn. No pydantic model is built per chunk: at hundreds of chunks a
second that is most of the gateway's own CPU time."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import orjson

from app.answer.choices import MAX_CHOICES, ChoiceChunk, ChoicePiece
from app.answer.inputs import ProviderUsage, UpstreamChunk
from app.core.cleaning import clean_text
from app.upstream.errors import UpstreamError, upstream_failure

#: The data of the event that ends an OpenAI-style stream.
DONE = b"[DONE]"
#: One event's data beyond this is no chat chunk (real ones are well under 10 KiB): it is
#: refused before it fills the memory.
MAX_EVENT_BYTES = 1 << 20
#: llm_calls.model and the rollup's key are VARCHAR(255).
MODEL_NAME_MAX_CHARS = 255
#: A count no real call reaches; llm_calls' token columns are 32-bit integers.
MAX_REPORTED_TOKENS = 999_999_999


def bad_response(reason: str) -> UpstreamError:
    """The one failure of a body that is no chat completion stream; `reason` names what was
    wrong (never the content) for the operator's log."""
    return upstream_failure("upstream_bad_response", reason=reason)


async def sse_data(blocks: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
    """The data of each event of an SSE body, in order: `data:` lines joined by newlines, an
    event ending at a blank line (or at the end of the body). Lines end in LF or CRLF;
    comments (`:`) and other fields are skipped."""
    cut: list[bytes] = []  # the start of a line a block's end cut, waiting for its rest
    cut_bytes = 0
    data: list[bytes] = []
    async for block in blocks:
        start = 0
        while (end := block.find(b"\n", start)) != -1:
            line = block[start:end]
            if cut:
                line, cut_bytes = b"".join((*cut, line)), 0
                cut.clear()
            if (event := _take_line(line, data)) is not None:
                yield event
            start = end + 1
        if start < len(block):
            cut.append(block[start:])
            cut_bytes += len(block) - start
            if cut_bytes > MAX_EVENT_BYTES:
                raise bad_response("event_too_large")
    if cut and (event := _take_line(b"".join(cut), data)) is not None:
        yield event
    if data:
        yield b"\n".join(data)


def _take_line(line: bytes, data: list[bytes]) -> bytes | None:
    """Add one line to the event being read; the event's data when the line ends it."""
    if line.endswith(b"\r"):
        line = line[:-1]
    if not line:
        event = b"\n".join(data) if data else None
        data.clear()
        return event
    field, _, value = line.partition(b":")
    if field == b"data":
        data.append(value[1:] if value.startswith(b" ") else value)
        if sum(len(part) for part in data) > MAX_EVENT_BYTES:
            raise bad_response("event_too_large")
    return None


def decode(data: bytes) -> Any:
    """The event's JSON. orjson first (fast); it refuses lone surrogate escapes, which the
    standard decoder keeps and the turn later replaces and counts, so it gets a second look."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise bad_response("data_not_json") from exc


def chunk_choices(obj: Any) -> list[Any]:
    """A chat.completion.chunk's `choices`, once the chunk is known to be one. Raises
    UpstreamError: the server's own error object as `upstream_error`, anything else
    malformed as `upstream_bad_response`."""
    if not isinstance(obj, dict):
        raise bad_response("chunk_not_object")
    if obj.get("error") is not None:
        raise upstream_failure("upstream_error", reason="error_event",
                               detail=error_detail(obj["error"]))
    choices = obj.get("choices")
    if not isinstance(choices, list):
        raise bad_response("choices_not_list")
    return choices


def parse_choice_chunk(obj: Any) -> ChoiceChunk:
    """One chat.completion.chunk, every choice kept apart: the one reading of a chunk, for
    the native turn (which reads choice 0, `parse_chunk`) and the OpenAI-compatible endpoint
    alike, so a malformed chunk is refused the same way on both. Raises UpstreamError as
    chunk_choices does. Called for every chunk: the checks are written for speed."""
    choices = chunk_choices(obj)
    model = obj.get("model")
    usage = obj.get("usage")
    return ChoiceChunk(
        tuple(map(_piece, choices)),
        None if usage is None else usage_of(usage),
        model_name(model) if model.__class__ is str else None)


def parse_chunk(obj: Any) -> UpstreamChunk:
    """One chat.completion.chunk as the native turn reads it: its first choice (index 0),
    parsed and checked as every choice is (`parse_choice_chunk`)."""
    return parse_choice_chunk(obj).first()


def _piece(choice: Any) -> ChoicePiece:
    """One choice of a chunk, every field the gateway uses checked. Exact type tests where
    JSON gives exact types (`int`, not a bool; `str`): cheaper than isinstance."""
    if choice.__class__ is not dict:
        raise bad_response("choice_not_object")
    index = choice.get("index", 0)
    if index.__class__ is not int or not 0 <= index < MAX_CHOICES:
        raise bad_response("choice_index_invalid")
    delta = choice.get("delta")
    if delta is None:
        delta = {}
    elif delta.__class__ is not dict:
        raise bad_response("delta_not_object")
    content = delta.get("content")
    if content is not None and content.__class__ is not str:
        raise bad_response("content_not_string")
    raw_calls = delta.get("tool_calls")
    tool_calls: tuple[dict[str, Any], ...] = ()
    if raw_calls is not None:
        if raw_calls.__class__ is not list or not all(
                call.__class__ is dict for call in raw_calls):
            raise bad_response("tool_calls_not_objects")
        tool_calls = tuple(raw_calls)
    finish = choice.get("finish_reason")
    if finish is not None and finish.__class__ is not str:
        raise bad_response("finish_reason_not_string")
    reasoning = delta.get("reasoning_content")
    if reasoning is None:
        reasoning = delta.get("reasoning")
    if reasoning is not None and reasoning.__class__ is not str:
        raise bad_response("reasoning_not_string")
    return ChoicePiece(index, content or "", tool_calls, finish or None, reasoning or "")


def error_detail(error: Any) -> str:
    """The model server's own error words, for the log."""
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return json.dumps(error, default=str)[:1000]


def usage_of(raw: object) -> ProviderUsage | None:
    """The provider's counts; counts no call can have (negative, absurdly large, not whole
    numbers) are no usage at all, so the turn falls back to an estimate instead of storing
    nonsense or failing."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise bad_response("usage_not_object")
    prompt, completion = _count(raw.get("prompt_tokens")), _count(raw.get("completion_tokens"))
    if prompt is None or completion is None:
        return None
    total = _count(raw.get("total_tokens")) or prompt + completion
    if not all(0 <= n <= MAX_REPORTED_TOKENS for n in (prompt, completion, total)):
        return None
    return ProviderUsage(prompt, completion, total, _reasoning_tokens(raw, completion))


def _reasoning_tokens(raw: Mapping[str, Any], completion: int) -> int | None:
    """`completion_tokens_details.reasoning_tokens`, a part of the completion tokens: None
    when absent or impossible (not a whole number, negative, more than the completion), which
    costs the call nothing but this one figure."""
    details = raw.get("completion_tokens_details")
    if not isinstance(details, Mapping):
        return None
    value = details.get("reasoning_tokens")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= completion:
        return None
    return value


def _count(value: Any) -> int | None:
    """A token count: an integer, or absent (0); anything else is no count."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def model_name(raw: str | None) -> str | None:
    """The model the server says answered, made fit for a row and a rollup key: a server's
    odd name (control characters, NUL, 300 characters) must not cost the answer its finish.
    Every chunk names the model, nearly always the same one: each name is cleaned once."""
    if not raw:
        return None
    return _fit_model_name(raw)


@functools.lru_cache(maxsize=256)
def _fit_model_name(raw: str) -> str | None:
    printable = "".join(ch for ch in clean_text(raw) if ch.isprintable())
    return printable[:MODEL_NAME_MAX_CHARS].strip() or None
