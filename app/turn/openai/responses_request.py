"""A `/v1/responses` body checked field by field and turned into the chat shape the completion
service speaks: `instructions` and `input` become chat messages (a `function_call` item an
assistant's tool call, a `function_call_output` item a `tool` message), function `tools` the
chat completions' tools, `max_output_tokens` the upstream `max_tokens`. Each refusal is a 400
naming its `param`, as OpenAI answers.

Unlike chat completions, unknown fields are not passed upstream: a Responses field means
something else to a chat completions model server (`text`, `reasoning`, `include`), so only
the fields mapped here reach it.

An `item_reference` names an output item of an earlier stored response: `item_references`
reads the ids out of a body, the caller looks them up (app.turn.stored.item_references), and the
parse puts each one's message or function call where the reference stood."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.api.bodies import NUL, NUL_REFUSED
from app.turn.openai.errors import OpenAIError, invalid
from app.turn.run.completion import CompletionRequest
from app.turn.stored.item_references import ItemReference, ResolvedItem, parse_item_id

#: The prefix of a response id; the rest is its assistant message's id in hex.
RESPONSE_PREFIX = "resp_"
_INPUT_ROLES = frozenset({"user", "assistant", "system", "developer"})
#: Content part types read as text.
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal"})
#: Fields passed upstream as they came (same meaning in both APIs).
_SAME_FIELDS = ("temperature", "top_p", "parallel_tool_calls", "user", "seed")


@dataclass(frozen=True)
class ResponsesRequest:
    """A checked request. `messages` are the client's, in the chat shape; a continuation's
    stored history is put ahead of them by the service."""

    model: str
    messages: list[dict[str, Any]]
    params: dict[str, Any]
    stream: bool
    store: bool
    previous_response: uuid.UUID | None
    previous_response_id: str | None
    echo: dict[str, Any]

    def completion(self, history: list[dict[str, Any]] | None = None,
                   times: tuple[Any, ...] = ()) -> CompletionRequest:
        return CompletionRequest(self.model, [*(history or []), *self.messages], 1,
                                 self.params, times=times)


def response_message_id(response_id: str) -> uuid.UUID | None:
    """The assistant message a response id names, or None for no id of ours."""
    if not response_id.startswith(RESPONSE_PREFIX):
        return None
    try:
        return uuid.UUID(hex=response_id[len(RESPONSE_PREFIX):])
    except ValueError:
        return None


def item_references(body: dict[str, Any]) -> list[ItemReference]:
    """The `item_reference` items of `input`, in order; an id the gateway never minted is
    the same 400 as an unknown one (a malformed item is the parse's to refuse)."""
    raw = body.get("input")
    refs: list[ItemReference] = []
    for position, item in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(item, dict) or item.get("type") != "item_reference":
            continue
        item_id = item.get("id")
        if not isinstance(item_id, str):
            raise invalid(f"'input[{position}].id' must be a string", f"input[{position}].id")
        ref = parse_item_id(item_id)
        if ref is None:
            raise item_not_found(item_id, position)
        refs.append(ref)
    return refs


def item_not_found(item_id: str, position: int | None) -> OpenAIError:
    param = "input" if position is None else f"input[{position}].id"
    return OpenAIError(400, f"Item with id '{item_id}' not found.", "item_not_found", param)


def parse_responses_body(body: dict[str, Any],
                         resolved: Mapping[str, ResolvedItem] | None = None) -> ResponsesRequest:
    """The request; `resolved` holds what each `item_reference` id of the body stands for."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("'model' must be a non-empty string", "model")
    messages = [*_instructions(body.get("instructions")),
                *_input(body.get("input"), resolved or {})]
    stream = _flag(body, "stream", False)
    store = _flag(body, "store", True)
    previous = body.get("previous_response_id")
    previous_id: uuid.UUID | None = None
    if previous is not None and (not isinstance(previous, str) or (
            previous_id := response_message_id(previous)) is None):
        raise previous_not_found(str(previous))
    if not any(m["role"] == "user" for m in messages) and (
            previous_id is None or not any(m["role"] == "tool" for m in messages)):
        raise invalid("'input' must hold a user message (or, with 'previous_response_id', "
                      "a function call output)", "input")
    params = {k: body[k] for k in _SAME_FIELDS if body.get(k) is not None}
    if (limit := body.get("max_output_tokens")) is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise invalid("'max_output_tokens' must be a positive integer", "max_output_tokens")
        params["max_tokens"] = limit
    params.update(_tools(body.get("tools"), body.get("tool_choice")))
    params.update(_text_format(body.get("text")))
    echo = {k: body.get(k) for k in ("instructions", "max_output_tokens", "temperature",
                                     "top_p", "tools", "tool_choice", "metadata", "user")}
    echo["parallel_tool_calls"] = body.get("parallel_tool_calls", True)
    return ResponsesRequest(model, messages, params, stream, store, previous_id,
                            previous if previous_id else None, echo)


def previous_not_found(response_id: str) -> OpenAIError:
    return OpenAIError(400, f"Previous response with id '{response_id}' not found.",
                       "previous_response_not_found", "previous_response_id")


def _flag(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(f"'{name}' must be a boolean", name)
    return value


def _text(value: str, param: str) -> str:
    if NUL in value:
        raise invalid(NUL_REFUSED.format(field=f"'{param}'"), param)
    return value


def _instructions(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, str):
        raise invalid("'instructions' must be a string", "instructions")
    return [{"role": "system", "content": _text(raw, "instructions")}]


def _input(raw: Any, resolved: Mapping[str, ResolvedItem]) -> list[dict[str, Any]]:
    if isinstance(raw, str):
        if not raw.strip():
            raise invalid("'input' must not be empty", "input")
        return [{"role": "user", "content": _text(raw, "input")}]
    if not isinstance(raw, list) or not raw:
        raise invalid("'input' must be a string or a non-empty array of items", "input")
    messages: list[dict[str, Any]] = []
    for position, item in enumerate(raw):
        param = f"input[{position}]"
        if not isinstance(item, dict):
            raise invalid(f"'{param}' must be an object", param)
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(item, param))
        elif kind == "function_call":
            _add_call(messages, item, param)
        elif kind == "function_call_output":
            messages.append(_call_output(item, param))
        elif kind == "reasoning":
            continue  # a reasoning model's item echoed back: the model server keeps none
        elif kind == "item_reference":
            _add_reference(messages, item, position, resolved)
        else:
            raise invalid(f"'{param}.type' {kind!r} is not supported by this gateway",
                          f"{param}.type")
    return messages


def _message(item: dict[str, Any], param: str) -> dict[str, Any]:
    role = item.get("role")
    if not isinstance(role, str) or role not in _INPUT_ROLES:  # an object is unhashable
        raise invalid(f"'{param}.role' must be one of {', '.join(sorted(_INPUT_ROLES))}",
                      f"{param}.role")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": _text(content, f"{param}.content")}
    if not isinstance(content, list):
        raise invalid(f"'{param}.content' must be a string or an array of content parts",
                      f"{param}.content")
    parts = [_part(part, f"{param}.content[{i}]") for i, part in enumerate(content)]
    if all(part["type"] == "text" for part in parts):
        return {"role": role, "content": "".join(part["text"] for part in parts)}
    return {"role": role, "content": parts}


def _part(part: Any, param: str) -> dict[str, Any]:
    """A Responses content part as a chat content part: text, or an image by its URL."""
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        raise invalid(f"'{param}' must be an object with a 'type'", param)
    kind = part["type"]
    if kind in _TEXT_PARTS:
        text = part.get("text", part.get("refusal"))
        if not isinstance(text, str):
            raise invalid(f"'{param}.text' must be a string", f"{param}.text")
        return {"type": "text", "text": _text(text, f"{param}.text")}
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        image: dict[str, Any] = {"url": part["image_url"]}
        if part.get("detail") is not None:
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    raise invalid(f"'{param}.type' {kind!r} is not supported by this gateway", f"{param}.type")


def _add_reference(messages: list[dict[str, Any]], item: dict[str, Any], position: int,
                   resolved: Mapping[str, ResolvedItem]) -> None:
    """A stored item in the reference's place: its message, its function call (merged as a
    `function_call` item is), or nothing for reasoning."""
    found = resolved.get(str(item.get("id")))
    if found is None:
        raise item_not_found(str(item.get("id")), position)
    if found.call is not None:
        _merge_call(messages, found.call)
    elif found.role is not None and found.content:
        messages.append({"role": found.role, "content": found.content})


def _add_call(messages: list[dict[str, Any]], item: dict[str, Any], param: str) -> None:
    """A function call the model made: a tool call of the assistant message it follows
    (calls in a row are one message, as the chat shape has them)."""
    name, arguments, call_id = item.get("name"), item.get("arguments"), item.get("call_id")
    if not isinstance(name, str) or not isinstance(call_id, str):
        raise invalid(f"'{param}' needs a string 'name' and 'call_id'", param)
    if not isinstance(arguments, str):
        raise invalid(f"'{param}.arguments' must be a string", f"{param}.arguments")
    _merge_call(messages, {"id": call_id, "type": "function",
                           "function": {"name": _text(name, f"{param}.name"),
                                        "arguments": _text(arguments, f"{param}.arguments")}})


def _merge_call(messages: list[dict[str, Any]], call: dict[str, Any]) -> None:
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
        if not last.get("content"):
            last["content"] = None
        return
    messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _call_output(item: dict[str, Any], param: str) -> dict[str, Any]:
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str):
        raise invalid(f"'{param}.call_id' must be a string", f"{param}.call_id")
    if isinstance(output, list):
        output = "".join(p.get("text", "") for p in output if isinstance(p, dict))
    if not isinstance(output, str):
        raise invalid(f"'{param}.output' must be a string", f"{param}.output")
    return {"role": "tool", "tool_call_id": call_id, "content": _text(output, f"{param}.output")}


def _tools(tools: Any, choice: Any) -> dict[str, Any]:
    """Function tools in the chat shape; a built-in tool (web search, files) is none this
    gateway runs."""
    params: dict[str, Any] = {}
    if tools is not None:
        if not isinstance(tools, list):
            raise invalid("'tools' must be an array", "tools")
        converted = []
        for position, tool in enumerate(tools):
            if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(
                    tool.get("name"), str):
                raise invalid(f"'tools[{position}]' must be a function tool with a 'name' "
                              "(no built-in tool runs here)", f"tools[{position}]")
            function = {k: tool[k] for k in ("name", "description", "parameters", "strict")
                        if tool.get(k) is not None}
            converted.append({"type": "function", "function": function})
        if converted:
            params["tools"] = converted
    if choice is not None:
        if isinstance(choice, str):
            params["tool_choice"] = choice
        elif isinstance(choice, dict) and choice.get("type") == "function":
            params["tool_choice"] = {"type": "function",
                                     "function": {"name": choice.get("name")}}
        else:
            raise invalid("'tool_choice' must be 'auto', 'none', 'required' or a function",
                          "tool_choice")
    return params


def _text_format(text: Any) -> dict[str, Any]:
    """`text.format` as the chat completions' `response_format`."""
    if text is None:
        return {}
    fmt = text.get("format") if isinstance(text, dict) else None
    if fmt is None:
        return {}
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object",
                                                            "json_schema"):
        raise invalid("'text.format.type' must be text, json_object or json_schema",
                      "text.format")
    if fmt["type"] == "text":
        return {}
    if fmt["type"] == "json_object":
        return {"response_format": {"type": "json_object"}}
    schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
    return {"response_format": {"type": "json_schema", "json_schema": schema}}
