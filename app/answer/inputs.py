"""What the turn core consumes from the model server, reduced to what the gateway uses: the
chunks of a streamed answer and a whole short answer. The upstream adapter builds these; the
core never sees the wire."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProviderUsage:
    """Token counts as the model server reported them. `reasoning_tokens`: the part of
    completion_tokens spent thinking (`completion_tokens_details.reasoning_tokens`), None
    when the server reported none."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    reasoning_tokens: int | None = None


@dataclass(slots=True)
class UpstreamChunk:
    """One chunk: its answer text (may be empty), and the usage, model name and finish reason
    when this chunk carries them, and its reasoning field text (the delta's
    `reasoning_content` or `reasoning`; empty for most models). Read-only by convention, not
    frozen: one is built for every chunk of every answer, and a frozen dataclass's __init__
    (object.__setattr__ per field) costs about four times a plain slots one's."""

    text: str
    usage: ProviderUsage | None = None
    model: str | None = None
    finish_reason: str | None = None
    reasoning: str = ""


@dataclass(frozen=True, slots=True)
class Completion:
    """A whole non-streamed answer (the short title and summary calls)."""

    text: str
    usage: ProviderUsage | None
    model: str | None
