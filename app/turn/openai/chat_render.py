"""The call in OpenAI's wire format: `chat.completion.chunk` objects for a stream, one
`chat.completion` for a whole reply, and the `chatgate` extension field (clients ignore
fields they do not know) with what only the gateway can say: the answer's METADATA, the
filter's warnings, the cost, and where the exchange was stored. A reasoning model's thinking
goes where DeepSeek's API and vLLM put it: `delta.reasoning_content` in a stream,
`message.reasoning_content` in a whole reply, null when the answer had none: a client that
finds no such key runs its own `<think>` parsing over `content` (LiteLLM's `completion()`
does) and would cut literal text the filter already judged to be answer."""

from __future__ import annotations

from typing import Any

from app.answer.choices import ChoiceDelta
from app.turn.run.completion import Closing, CompletionCall


def usage(closing: Closing) -> dict[str, Any]:
    """OpenAI's usage object; `completion_tokens_details.reasoning_tokens` only when the
    model server reported them (absent is unknown, not zero, as OpenAI's own replies)."""
    body: dict[str, Any] = {"prompt_tokens": closing.prompt_tokens,
                            "completion_tokens": closing.completion_tokens,
                            "total_tokens": closing.prompt_tokens + closing.completion_tokens}
    if closing.reasoning_tokens is not None:
        body["completion_tokens_details"] = {"reasoning_tokens": closing.reasoning_tokens}
    return body


def extension(closing: Closing) -> dict[str, Any]:
    """The `chatgate` field: choice 0's METADATA and every warning; per choice when n > 1."""
    ext: dict[str, Any] = {
        "response_metadata": closing.metadata[0] or {} if closing.metadata else {},
        "warnings": closing.warnings,
        "cost_usd": closing.cost_usd,
        "usage_source": closing.usage_source,
    }
    if closing.thread_id is not None:
        ext.update(thread_id=str(closing.thread_id), message_id=str(closing.message_id),
                   stored=closing.stored)
    if len(closing.metadata) > 1:
        ext["choices"] = [{"index": i, "response_metadata": md or {}}
                          for i, md in enumerate(closing.metadata)]
    return ext


class ChunkWriter:
    """The chunks of one streamed call, in order (see `opening`, `delta`, `closing`)."""

    def __init__(self, call: CompletionCall, *, include_usage: bool) -> None:
        self.call = call
        self.include_usage = include_usage

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.call.id, "object": "chat.completion.chunk",
            "created": self.call.created, "model": self.call.request.model,
            "system_fingerprint": None, "choices": choices,
        }
        if self.include_usage:
            body["usage"] = None
        body.update(extra)
        return body

    def opening(self) -> list[dict[str, Any]]:
        """The role of every choice, as OpenAI starts a stream."""
        return [self.chunk([{"index": i, "delta": {"role": "assistant", "content": ""},
                             "logprobs": None, "finish_reason": None}])
                for i in range(self.call.request.n)]

    def delta(self, delta: ChoiceDelta) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if delta.reasoning:
            body["reasoning_content"] = delta.reasoning
        if delta.text:
            body["content"] = delta.text
        if delta.tool_calls:
            body["tool_calls"] = list(delta.tool_calls)
        return self.chunk([{"index": delta.index, "delta": body, "logprobs": None,
                            "finish_reason": delta.finish_reason}])

    def closing(self, finishes: list[ChoiceDelta]) -> list[dict[str, Any]]:
        """The finishes, the last one with the extension; then the usage chunk if asked."""
        closing = self.call.closing
        chunks = [self.delta(finish) for finish in finishes]
        if chunks:
            chunks[-1]["chatgate"] = extension(closing)
        if self.include_usage:
            chunks.append(self.chunk([], usage=usage(closing), chatgate=extension(closing)))
        return chunks


def whole_reply(call: CompletionCall, deltas: list[ChoiceDelta]) -> dict[str, Any]:
    """The non-streamed `chat.completion`: each choice's text is the concatenation of the
    deltas a stream would have sent, its tool calls merged."""
    texts: dict[int, str] = {}
    finishes: dict[int, str | None] = {}
    for delta in deltas:
        texts[delta.index] = texts.get(delta.index, "") + delta.text
        finishes[delta.index] = delta.finish_reason or finishes.get(delta.index)
    choices = []
    for index in sorted(call.choices.choices):
        choice = call.choices.choices[index]
        message: dict[str, Any] = {"role": "assistant", "content": texts.get(index, ""),
                                   "reasoning_content": choice.answer.reasoning or None}
        if choice.tool_calls:
            message["tool_calls"] = choice.tool_calls
            message["content"] = message["content"] or None
        choices.append({"index": index, "message": message, "logprobs": None,
                        "finish_reason": finishes.get(index) or "stop"})
    return {"id": call.id, "object": "chat.completion", "created": call.created,
            "model": call.request.model, "system_fingerprint": None, "choices": choices,
            "usage": usage(call.closing), "chatgate": extension(call.closing)}


def models_list(names: list[str], created: int) -> dict[str, Any]:
    return {"object": "list", "data": [model(name, created) for name in names]}


def model(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "chatgate"}
