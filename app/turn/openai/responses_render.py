"""A call in the Responses API's wire format: one `response` object for a whole reply (and
for a stored one), or the stream of typed events the SDKs read, each with its
`sequence_number`. The text is the completion service's clean deltas (the one MarkerFilter);
a reasoning model's thinking (the one reasoning split's) is a `reasoning` output item ahead of
the message, its text the item's one `summary_text` part, as OpenAI's reasoning models show a
summary: the SDKs read it there, and it is never sent back to the model; a chat tool call
becomes a `function_call` output item; the `chatgate` field is the chat completions'
extension."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.answer.choices import ChoiceDelta
from app.turn.openai.chat_render import extension
from app.turn.run.completion import Closing
from app.turn.stored.response_threads import StoredAnswer, response_id

#: finish_reason -> the Responses API's incomplete reason.
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
#: A stored message's status -> the response's.
_STATUS = {"complete": "completed", "streaming": "in_progress", "interrupted": "incomplete",
           "failed": "failed"}


@dataclass
class Outcome:
    """What a response object says, from a call or from a stored message."""

    id: str
    created_at: int
    model: str
    status: str = "in_progress"
    text: str = ""
    #: The visible reasoning ("" without any): a `reasoning` item ahead of the message.
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    incomplete_reason: str | None = None
    chatgate: dict[str, Any] | None = None
    echo: dict[str, Any] = field(default_factory=dict)


def stored_reasoning_tokens(meta: dict[str, Any]) -> int:
    """A stored answer's reasoning tokens: its main call's
    `completion_tokens_details.reasoning_tokens`, as the finish records it; 0 when none."""
    calls = (meta.get("processingDetails") or {}).get("llm_calls") or []
    for call in calls:
        if isinstance(call, dict) and call.get("stage") == "main":
            usage = (call.get("response") or {}).get("usage") or {}
            value = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return 0


def usage(prompt: int, completion: int, reasoning: int = 0) -> dict[str, Any]:
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": prompt + completion}


def _hex(rid: str) -> str:
    return rid.removeprefix("resp_")


def message_item(rid: str, text: str, status: str, *, index: int = 0) -> dict[str, Any]:
    suffix = f"_{index}" if index else ""
    return {"id": f"msg_{_hex(rid)}{suffix}", "type": "message", "status": status,
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [],
                         "logprobs": []}]}


def reasoning_item(rid: str, text: str, status: str, *, index: int = 0) -> dict[str, Any]:
    suffix = f"_{index}" if index else ""
    return {"id": f"rs_{_hex(rid)}{suffix}", "type": "reasoning", "status": status,
            "summary": [{"type": "summary_text", "text": text}]}


def call_item(rid: str, index: int, call: dict[str, Any], status: str) -> dict[str, Any]:
    function = call.get("function") or {}
    return {"id": f"fc_{_hex(rid)}_{index}", "type": "function_call", "status": status,
            "call_id": call.get("id") or f"call_{_hex(rid)}_{index}",
            "name": function.get("name") or "", "arguments": function.get("arguments") or ""}


def output(outcome: Outcome) -> list[dict[str, Any]]:
    """The reasoning (when the model thought), the message (unless the answer is only tool
    calls), then the function calls."""
    done = "completed" if outcome.status == "completed" else "incomplete"
    items = [reasoning_item(outcome.id, outcome.reasoning, done)] if outcome.reasoning else []
    if outcome.text or not outcome.tool_calls:
        items.append(message_item(outcome.id, outcome.text, done))
    items += [call_item(outcome.id, i, call, "completed")
              for i, call in enumerate(outcome.tool_calls)]
    return items


def response_object(outcome: Outcome, *, items: list[dict[str, Any]] | None = None
                    ) -> dict[str, Any]:
    echo = outcome.echo
    body: dict[str, Any] = {
        "id": outcome.id, "object": "response", "created_at": outcome.created_at,
        "status": outcome.status, "error": outcome.error,
        "incomplete_details": ({"reason": outcome.incomplete_reason}
                               if outcome.incomplete_reason else None),
        "instructions": echo.get("instructions"),
        "max_output_tokens": echo.get("max_output_tokens"), "model": outcome.model,
        "output": output(outcome) if items is None else items,
        "parallel_tool_calls": echo.get("parallel_tool_calls", True),
        "previous_response_id": echo.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "store": echo.get("store", True), "temperature": echo.get("temperature"),
        "text": {"format": {"type": "text"}}, "tool_choice": echo.get("tool_choice") or "auto",
        "tools": echo.get("tools") or [], "top_p": echo.get("top_p"), "truncation": "disabled",
        "usage": outcome.usage, "user": echo.get("user"), "metadata": echo.get("metadata") or {},
    }
    if outcome.chatgate is not None:
        body["chatgate"] = outcome.chatgate
    return body


def stored_outcome(answer: StoredAnswer) -> Outcome:
    """A stored assistant message as its response."""
    meta = answer.metadata
    status = _STATUS.get(answer.status, "completed")
    error = meta.get("error") if status == "failed" else None
    finish = (meta.get("stream") or {}).get("finish_reason")
    reason = (_INCOMPLETE.get(str(finish)) if status == "completed" else
              meta.get("interrupted_reason") or "interrupted" if status == "incomplete"
              else None)
    if reason and status == "completed":
        status = "incomplete"
    chatgate = {"response_metadata": meta.get("response_metadata") or {},
                "warnings": (meta.get("stream") or {}).get("warnings") or [],
                "cost_usd": meta.get("cost_usd"), "usage_source": meta.get("usage_source"),
                "thread_id": str(answer.thread_id), "message_id": str(answer.id),
                "stored": True}
    return Outcome(
        id=response_id(answer.id), created_at=int(answer.created_at.timestamp()),
        model=str(meta.get("model") or ""), status=status, text=answer.content,
        reasoning=answer.reasoning or "",
        tool_calls=list(meta.get("tool_calls") or []),
        usage=usage(int(meta.get("prompt_tokens") or 0),
                    int(meta.get("completion_tokens") or 0), stored_reasoning_tokens(meta)),
        error=({"code": error.get("code"), "message": error.get("message"),
                "type": "server_error", "param": None} if isinstance(error, dict) else None),
        incomplete_reason=reason, chatgate=chatgate)


class EventWriter:
    """The events of one streamed response, in order, numbered. Output items open in the
    order their first piece arrives; a new item closes the one before it."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self._sequence = 0
        self._items: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._calls: dict[int, dict[str, Any]] = {}
        self._texts = 0
        self._thoughts = 0

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        body = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return body

    def opening(self) -> list[dict[str, Any]]:
        snapshot = response_object(self.outcome, items=[])
        return [self.event("response.created", response=snapshot),
                self.event("response.in_progress", response=snapshot)]

    def delta(self, delta: ChoiceDelta) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if delta.reasoning:
            events += self._reasoning_piece(delta.reasoning)
        if delta.text:
            if self._open is None or self._open["type"] != "message":
                events += self._open_text()
            item = self._open
            assert item is not None
            item["content"][0]["text"] += delta.text
            events.append(self.event("response.output_text.delta", item_id=item["id"],
                                     output_index=len(self._items) - 1, content_index=0,
                                     delta=delta.text, logprobs=[]))
        for piece in delta.tool_calls or ():
            events += self._tool_piece(piece)
        return events

    def _open_text(self) -> list[dict[str, Any]]:
        events = self._close()
        item = message_item(self.outcome.id, "", "in_progress", index=self._texts)
        self._texts += 1
        self._items.append(item)
        self._open = item
        index = len(self._items) - 1
        empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return [*events,
                self.event("response.output_item.added", output_index=index,
                           item={**item, "content": []}),
                self.event("response.content_part.added", item_id=item["id"],
                           output_index=index, content_index=0, part=empty)]

    def _reasoning_piece(self, text: str) -> list[dict[str, Any]]:
        """A piece of the thinking: the reasoning item (opened at its first piece, with its
        one summary part) grows by a `reasoning_summary_text.delta`."""
        events: list[dict[str, Any]] = []
        if self._open is None or self._open["type"] != "reasoning":
            events += self._close()
            item = reasoning_item(self.outcome.id, "", "in_progress", index=self._thoughts)
            self._thoughts += 1
            self._items.append(item)
            self._open = item
            index = len(self._items) - 1
            events += [self.event("response.output_item.added", output_index=index,
                                  item={**item, "summary": []}),
                       self.event("response.reasoning_summary_part.added", item_id=item["id"],
                                  output_index=index, summary_index=0,
                                  part={"type": "summary_text", "text": ""})]
        item = self._open
        assert item is not None
        item["summary"][0]["text"] += text
        events.append(self.event("response.reasoning_summary_text.delta", item_id=item["id"],
                                 output_index=len(self._items) - 1, summary_index=0,
                                 delta=text))
        return events

    def _tool_piece(self, piece: dict[str, Any]) -> list[dict[str, Any]]:
        """A chat tool call delta: a new index opens a `function_call` item, arguments are
        its `function_call_arguments.delta` events."""
        index = piece.get("index", 0)
        function = piece.get("function") or {}
        events: list[dict[str, Any]] = []
        item = self._calls.get(index)
        if item is None:
            events += self._close()
            item = call_item(self.outcome.id, len(self._calls),
                             {"id": piece.get("id"), "function": {
                                 "name": function.get("name"), "arguments": ""}},
                             "in_progress")
            self._calls[index] = item
            self._items.append(item)
            self._open = item
            events.append(self.event("response.output_item.added",
                                     output_index=len(self._items) - 1, item=dict(item)))
        elif function.get("name") and not item["name"]:
            item["name"] = function["name"]
        if arguments := function.get("arguments"):
            item["arguments"] += arguments
            events.append(self.event("response.function_call_arguments.delta",
                                     item_id=item["id"],
                                     output_index=self._items.index(item), delta=arguments))
        return events

    def _close(self) -> list[dict[str, Any]]:
        item, self._open = self._open, None
        if item is None:
            return []
        index = self._items.index(item)
        item["status"] = "completed"
        if item["type"] == "function_call":
            return [self.event("response.function_call_arguments.done", item_id=item["id"],
                               output_index=index, arguments=item["arguments"]),
                    self.event("response.output_item.done", output_index=index, item=item)]
        if item["type"] == "reasoning":
            summary = item["summary"][0]
            return [self.event("response.reasoning_summary_text.done", item_id=item["id"],
                               output_index=index, summary_index=0, text=summary["text"]),
                    self.event("response.reasoning_summary_part.done", item_id=item["id"],
                               output_index=index, summary_index=0, part=summary),
                    self.event("response.output_item.done", output_index=index, item=item)]
        part = item["content"][0]
        return [self.event("response.output_text.done", item_id=item["id"],
                           output_index=index, content_index=0, text=part["text"],
                           logprobs=[]),
                self.event("response.content_part.done", item_id=item["id"],
                           output_index=index, content_index=0, part=part),
                self.event("response.output_item.done", output_index=index, item=item)]

    def closing(self, outcome: Outcome) -> list[dict[str, Any]]:
        """The open item closed (an empty message when neither text nor a tool call came, as
        `output` has it), then the response's last event: completed, incomplete or failed,
        with the usage and `chatgate`."""
        events = []
        answered = any(item["type"] != "reasoning" for item in self._items)
        if not answered and outcome.status != "failed":
            events += self._open_text()
        events += self._close()
        kind = {"completed": "response.completed", "incomplete": "response.incomplete",
                "failed": "response.failed"}[outcome.status]
        events.append(self.event(kind, response=response_object(outcome, items=self._items)))
        return events


def closed_outcome(outcome: Outcome, closing: Closing, text: str, tool_calls: list[dict[str, Any]],
                   finish_reason: str | None, reasoning: str = "") -> Outcome:
    """The call's outcome once it is over: status, usage, error, `chatgate`."""
    failure = closing.failure
    outcome.text, outcome.tool_calls, outcome.reasoning = text, tool_calls, reasoning
    outcome.usage = usage(closing.prompt_tokens, closing.completion_tokens,
                          closing.reasoning_tokens or 0)
    outcome.chatgate = extension(closing)
    if failure is not None:
        outcome.status = "failed"
        outcome.error = {"code": failure.code, "message": failure.message}
    elif reason := _INCOMPLETE.get(finish_reason or ""):
        outcome.status, outcome.incomplete_reason = "incomplete", reason
    else:
        outcome.status = "completed"
    return outcome
