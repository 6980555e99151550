"""Drive one streamed chat completion through the OpenAI SDK and keep what arrived."""

from __future__ import annotations

from dataclasses import dataclass, field

import openai
from openai.types.chat import ChatCompletionChunk
from openai.types.completion_usage import CompletionUsage

CONTEXT = '<!-- MSG_CONTEXT: {"history": [{"role": "user", "content": "hi \\u003c3"}]} -->'


@dataclass
class Streamed:
    """Everything one stream delivered."""

    chunks: list[ChatCompletionChunk] = field(default_factory=list)
    deltas: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    usage: CompletionUsage | None = None

    @property
    def text(self) -> str:
        return "".join(self.deltas)


def user_message(text: str, context: str | None = CONTEXT) -> list[dict[str, str]]:
    """The request shape the gateway sends: system prompt, MSG_CONTEXT + newline + user text."""
    content = f"{context}\n{text}" if context else text
    return [{"role": "system", "content": "You are helpful."},
            {"role": "user", "content": content}]


async def stream_chat(
    llm: openai.AsyncOpenAI, text: str, *, include_usage: bool = True, into: Streamed | None = None
) -> Streamed:
    """Stream an answer to `text`; `into` keeps what arrived even when the stream fails."""
    got = into if into is not None else Streamed()
    if include_usage:
        stream = await llm.chat.completions.create(
            model="demo-1", messages=user_message(text), stream=True,  # type: ignore[arg-type]
            stream_options={"include_usage": True},
        )
    else:
        stream = await llm.chat.completions.create(
            model="demo-1", messages=user_message(text), stream=True,  # type: ignore[arg-type]
        )
    async for chunk in stream:
        got.chunks.append(chunk)
        if chunk.usage is not None:
            got.usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                got.deltas.append(choice.delta.content)
            if choice.finish_reason is not None:
                got.finish_reason = choice.finish_reason
    return got
