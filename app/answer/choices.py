"""The answers of one call that asked for `n` choices, each choice's text through its own
AnswerStream (so its own MarkerFilter), and its tool calls passed through as they came. A
call the model wrote inline (app.stream.tools, when the request offered tools) becomes one
whole tool call delta in the same shape, with an id of its own, when its block ends; the
choice then finishes with `tool_calls`.

    choices = ChoiceSet(n)
    for chunk in chunks:                  # ChoiceChunk
        deltas = choices.feed(chunk)      # ChoiceDelta per choice that has something to show
    deltas = choices.end()                # or choices.fail(failure, flush=...)

A choice's finish_reason is kept, not sent on, until the whole call is over: the text the
filter still holds comes out first, and a client reads the finish only once every clean
character is in. The text of every choice is exactly what the native API would stream for
the same output: the same core, one stream per choice."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from app.answer.answer import AnswerStream
from app.answer.call_usage import CallContext, main_call_record
from app.answer.estimate import estimate_tokens_of_size
from app.answer.events import AnswerOut, Delta, Reasoning, TurnFailure
from app.answer.inputs import ProviderUsage, UpstreamChunk
from app.answer.records import CallRecord, FinalStatus
from app.stream import FilterWarning, JsonObject, ReasoningFormat, ToolCall, ToolFormat

#: More choices than any client asks for: an index past it is a broken stream, not a choice.
MAX_CHOICES = 128


@dataclass(slots=True)
class ChoicePiece:
    """One choice's part of one upstream chunk: its text, its tool call deltas (the model
    server's objects, untouched) and its finish reason. Read-only by convention, not frozen:
    one is built per choice of every chunk, and a frozen dataclass's __init__ costs several
    times a plain one's (app.answer.inputs.UpstreamChunk says more)."""

    index: int
    text: str = ""
    tool_calls: tuple[dict[str, Any], ...] = ()
    finish_reason: str | None = None
    reasoning: str = ""


@dataclass(slots=True)
class ChoiceChunk:
    """One upstream chunk of a call with choices (read-only by convention, as ChoicePiece)."""

    pieces: tuple[ChoicePiece, ...] = ()
    usage: ProviderUsage | None = None
    model: str | None = None

    @property
    def text(self) -> str:
        """Everything the model wrote in this chunk, text and tool call deltas alike (the
        first of it ends the first-token wait, and marks the first token)."""
        return "".join(piece.text + "".join(json.dumps(call) for call in piece.tool_calls)
                       for piece in self.pieces)

    @property
    def reasoning(self) -> str:
        """The reasoning field text of every choice in this chunk (the first of it ends the
        first-token wait too: a model thinks before it answers)."""
        return "".join(piece.reasoning for piece in self.pieces)

    @property
    def finish_reason(self) -> str | None:
        return next((p.finish_reason for p in self.pieces if p.finish_reason), None)

    def first(self) -> UpstreamChunk:
        """Choice 0 as the native turn reads it (its request asks for one choice): that
        choice's text and finish reason with the chunk's usage and model. A chunk without
        choice 0 (the closing usage chunk has no choices) has no text."""
        for piece in self.pieces:
            if piece.index == 0:
                return UpstreamChunk(piece.text, self.usage, self.model, piece.finish_reason,
                                     piece.reasoning)
        return UpstreamChunk("", self.usage, self.model)


@dataclass(frozen=True, slots=True)
class ChoiceDelta:
    """What one choice shows now: clean text, clean reasoning, tool call deltas, or (at the
    end) its finish."""

    index: int
    text: str = ""
    tool_calls: tuple[dict[str, Any], ...] = ()
    finish_reason: str | None = None
    reasoning: str = ""


def tool_call_object(call: ToolCall) -> dict[str, Any]:
    """An inline call as chat completions' tool call, with an id of its own: what a stream
    sends, a whole reply and a stored answer's `tool_calls` hold."""
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": call.name, "arguments": call.arguments}}


def choice_deltas(index: int, out: AnswerOut | None) -> list[ChoiceDelta]:
    """One choice's answer output as ChoiceDeltas: its reasoning, then its text."""
    if out is None:
        return []
    if isinstance(out, Delta):
        return [ChoiceDelta(index, out.text)]
    if isinstance(out, Reasoning):
        return [ChoiceDelta(index, reasoning=out.text)]
    return [ChoiceDelta(index, reasoning=out[0].text), ChoiceDelta(index, out[1].text)]


@dataclass
class Choice:
    """One choice: its answer and its tool calls merged for a whole (non-streamed) reply."""

    index: int
    answer: AnswerStream
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    #: The model wrote a call inline: a `stop` finish is `tool_calls`.
    called_inline: bool = False

    def inline_calls(self, calls: list[ToolCall]) -> tuple[dict[str, Any], ...]:
        """Inline calls as whole tool call deltas (each after the calls so far), merged."""
        deltas = tuple({"index": len(self.tool_calls) + k, **tool_call_object(call)}
                       for k, call in enumerate(calls))
        self.merge_tool_calls(deltas)
        self.called_inline = True
        return deltas

    @property
    def finish(self) -> str:
        reason = self.finish_reason or "stop"
        return "tool_calls" if reason == "stop" and self.called_inline else reason

    def merge_tool_calls(self, deltas: Sequence[Mapping[str, Any]]) -> None:
        """Streamed tool call deltas into whole calls: by `index`, `arguments` appended, the
        other fields as the first delta that had them."""
        for delta in deltas:
            position = delta.get("index", len(self.tool_calls))
            while len(self.tool_calls) <= position:
                self.tool_calls.append({"function": {"arguments": ""}})
            call = self.tool_calls[position]
            for key, value in delta.items():
                if key == "function" and isinstance(value, Mapping):
                    function = call["function"]
                    for name, part in value.items():
                        if name == "arguments":
                            function["arguments"] += part or ""
                        elif part is not None:
                            function.setdefault(name, part)
                elif key != "index" and value is not None:
                    call.setdefault(key, value)


class ChoiceSet:
    """Every choice of one call; see the module docstring."""

    def __init__(self, n: int = 1, *, keep_raw: bool = False,
                 reasoning_format: ReasoningFormat = "think",
                 reasoning_tag: str = "think", tool_format: ToolFormat = "none",
                 tool_tag: str = "tool_call", tools_offered: bool = False) -> None:
        self._keep_raw = keep_raw
        self._reasoning = reasoning_format, reasoning_tag
        self._tools = tool_format, tool_tag, tools_offered
        self.choices: dict[int, Choice] = {}
        for index in range(n):
            self._choice(index)
        self.usage: ProviderUsage | None = None
        self.model: str | None = None

    @property
    def first(self) -> AnswerStream:
        """Choice 0: the one a thread stores."""
        return self.choices[0].answer

    @property
    def status(self) -> FinalStatus:
        return self.first.status

    def _choice(self, index: int) -> Choice:
        if index not in self.choices:
            reasoning_format, reasoning_tag = self._reasoning
            tool_format, tool_tag, tools_offered = self._tools
            self.choices[index] = Choice(index, AnswerStream(
                keep_raw=self._keep_raw, reasoning_format=reasoning_format,
                reasoning_tag=reasoning_tag, tool_format=tool_format, tool_tag=tool_tag,
                tools_offered=tools_offered))
        return self.choices[index]

    def feed(self, chunk: ChoiceChunk) -> list[ChoiceDelta]:
        self.model = chunk.model or self.model
        if chunk.usage is not None:
            self.usage = chunk.usage
        out: list[ChoiceDelta] = []
        for piece in chunk.pieces:
            choice = self._choice(piece.index)
            choice.finish_reason = piece.finish_reason or choice.finish_reason
            shown = choice.answer.feed(UpstreamChunk(piece.text, model=chunk.model,
                                                     finish_reason=piece.finish_reason,
                                                     reasoning=piece.reasoning))
            if shown is not None:
                out += choice_deltas(piece.index, shown)
            if choice.answer.calls_waiting:
                out += self._inline_calls(choice)
            if piece.tool_calls:
                choice.merge_tool_calls(piece.tool_calls)
                choice.answer.raw_bytes += sum(len(str(c)) for c in piece.tool_calls)
                out.append(ChoiceDelta(piece.index, tool_calls=piece.tool_calls))
        return out

    def end(self) -> list[ChoiceDelta]:
        """The call is over: what each filter held, then every choice's finish."""
        return self._close([(c, c.answer.end()) for c in self._ordered()])

    def fail(self, failure: TurnFailure, *, flush: bool) -> list[ChoiceDelta]:
        """The call failed: with `flush`, the text the filters held (it is real answer text);
        no finish is sent, the client is told of the failure instead."""
        held = [(c, c.answer.fail(failure, flush=flush)) for c in self._ordered()]
        return [d for c, shown in held
                for d in [*choice_deltas(c.index, shown), *self._inline_calls(c)]]

    def can_continue(self) -> bool:
        """One choice of text alone: a continuation call can finish it (tool calls and
        several choices cannot be stitched)."""
        return len(self.choices) == 1 and not self.choices[0].tool_calls

    def said(self) -> str:
        return self.first.content

    def reopen(self) -> None:
        """A continuation's chunks follow (AnswerStream.reopen); its usage is its own."""
        self.first.reopen()
        self.choices[0].finish_reason = None
        self.usage, self.model = None, None

    def _close(self, held: list[tuple[Choice, AnswerOut | None]]) -> list[ChoiceDelta]:
        out = [d for c, shown in held
               for d in [*choice_deltas(c.index, shown), *self._inline_calls(c)]]
        return out + [ChoiceDelta(c.index, finish_reason=c.finish) for c, _ in held]

    @staticmethod
    def _inline_calls(choice: Choice) -> list[ChoiceDelta]:
        """The calls the model wrote inline whose block ended, as one tool call delta."""
        calls = choice.answer.take_tool_calls()
        if not calls:
            return []
        return [ChoiceDelta(choice.index, tool_calls=choice.inline_calls(calls))]

    def _ordered(self) -> list[Choice]:
        return [self.choices[index] for index in sorted(self.choices)]

    def metadata(self, index: int = 0) -> JsonObject | None:
        return self.choices[index].answer.metadata

    def take_warnings(self) -> list[FilterWarning]:
        """The warnings of every choice raised since the last call."""
        return [w for choice in self._ordered() for w in choice.answer.take_warnings()]

    def call_record(
        self, ctx: CallContext, *, prompt: Sequence[Mapping[str, str]],
        started_at: dt.datetime, first_token_at: dt.datetime | None, finished_at: dt.datetime,
    ) -> CallRecord:
        """The call's one record: the provider's usage for all choices when it came, else
        an estimate from the raw output of every choice."""
        first = self.first
        first.usage, first.model = self.usage, self.model or first.model
        record = main_call_record(first, ctx, prompt=prompt, started_at=started_at,
                                  first_token_at=first_token_at, finished_at=finished_at)
        if self.usage is not None or len(self.choices) == 1:
            return record
        completion = estimate_tokens_of_size(
            sum(choice.answer.raw_bytes for choice in self.choices.values()))
        return replace(record, completion_tokens=completion, cost_usd=ctx.prices.cost_usd(
            record.model, record.prompt_tokens, completion))


def check_index(index: int) -> bool:
    """A choice index the gateway accepts from a model server."""
    return 0 <= index < MAX_CHOICES
