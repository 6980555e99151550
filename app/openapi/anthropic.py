"""The Anthropic Messages API in the OpenAPI document: `POST /v1/messages` and its
`count_tokens`. The request schemas hold what the gateway reads (each refusal a 400 in
Anthropic's shape naming the field); fields not listed are accepted and not sent on. The key
may come as `x-api-key` (the anthropic SDKs' header) or as a bearer token."""

from __future__ import annotations

from app.openapi.openai import CALL_REFUSALS
from app.openapi.schemas import (
    ANY_OBJECT,
    BOOLEAN,
    COUNT,
    JSON,
    NUMBER,
    SSE,
    TEXT,
    UUID,
    Schema,
    array,
    header_parameter,
    json_response,
    nullable,
    obj,
    operation,
    sse_event,
)
from app.turn.anthropic.render import STOP_REASONS
from app.turn.openai.errors import THREAD_HEADER

#: Either header carries the key on these routes.
SECURITY: list[Schema] = [{"bearer": []}, {"anthropicKey": []}]
_MODEL = {"type": "string", "minLength": 1, "description": "One of `GET /v1/models`."}
_EVENTS = ["message_start", "ping", "content_block_start", "content_block_delta",
           "content_block_stop", "message_delta", "message_stop", "error"]
_STOP_REASONS = sorted({*STOP_REASONS.values(), "end_turn"})


def _block() -> Schema:
    return obj({"type": TEXT}, {"text": TEXT},
               description="`text`, `image` (user), `tool_use` (assistant), `tool_result` "
                           "(user), `thinking` (assistant; not sent on).")


def _request(*, counted: bool) -> Schema:
    content = {"anyOf": [TEXT, array(_block())]}
    message = obj({"role": {"type": "string", "enum": ["user", "assistant"]},
                   "content": content})
    required: dict[str, Schema] = {
        "model": _MODEL, "messages": {**array(message, minItems=1),
                                      "contains": obj({"role": {"const": "user"}})}}
    if not counted:
        required["max_tokens"] = {"type": "integer", "minimum": 1}
    optional: dict[str, Schema] = {
        "system": {"anyOf": [TEXT, array(obj({"type": {"const": "text"}, "text": TEXT}))]},
        "tools": array(obj({"name": TEXT, "input_schema": ANY_OBJECT},
                           {"description": TEXT, "type": {"const": "custom"}})),
        "tool_choice": obj({"type": {"type": "string",
                                     "enum": ["auto", "any", "tool", "none"]}},
                           {"name": TEXT, "disable_parallel_tool_use": BOOLEAN}),
    }
    if not counted:
        optional.update({
            "stream": nullable(BOOLEAN), "temperature": nullable(NUMBER),
            "top_p": nullable(NUMBER), "stop_sequences": nullable(array(TEXT)),
            "metadata": nullable(obj(optional={"user_id": nullable(TEXT)}))})
    return obj(required, optional,
               description="Fields not listed here are accepted and not sent to the model "
                           "server.")


def schemas() -> dict[str, Schema]:
    usage = obj({"input_tokens": COUNT, "output_tokens": COUNT},
                {"cache_creation_input_tokens": COUNT, "cache_read_input_tokens": COUNT})
    return {
        "AnthropicMessageRequest": _request(counted=False),
        "AnthropicCountTokensRequest": _request(counted=True),
        "AnthropicMessage": obj({
            "id": {"type": "string", "pattern": "^msg_"}, "type": {"const": "message"},
            "role": {"const": "assistant"}, "model": TEXT, "content": array(_block()),
            "stop_reason": {"type": "string", "enum": _STOP_REASONS},
            "stop_sequence": {"type": "null"}, "usage": usage}, {"chatgate": ANY_OBJECT}),
        "AnthropicTokenCount": obj({"input_tokens": COUNT}),
    }


def paths() -> dict[str, Schema]:
    message = operation(
        "anthropic", "createAnthropicMessage", "Anthropic's Messages API", tag="anthropic",
        body={"$ref": "#/components/schemas/AnthropicMessageRequest"},
        refusals=CALL_REFUSALS,
        parameters=[header_parameter(THREAD_HEADER, UUID,
                                     "Store the exchange in this thread of the user's."),
                    header_parameter("anthropic-version", TEXT, "Accepted; changes nothing.")],
        responses={"200": {
            "description": "A whole message, or with `stream: true` `event:` and `data:` "
                           "frames from `message_start` to `message_stop` (a failure: a "
                           "last `error` event).",
            "content": {JSON: {"schema": {"$ref": "#/components/schemas/AnthropicMessage"}},
                        SSE: {"schema": sse_event({"type": "string", "enum": _EVENTS})}}}})
    count = operation(
        "anthropic", "countAnthropicTokens", "A Messages request's input tokens, estimated",
        tag="anthropic", body={"$ref": "#/components/schemas/AnthropicCountTokensRequest"},
        refusals=(400, 403, 404, 413, 415),
        description="The gateway's estimate (a token per 4 bytes of UTF-8, a few per "
                    "message) of the prompt it would send; nothing is sent or billed.",
        responses={"200": json_response(
            "The estimate.", {"$ref": "#/components/schemas/AnthropicTokenCount"})})
    return {"/v1/messages": {"post": {**message, "security": SECURITY}},
            "/v1/messages/count_tokens": {"post": {**count, "security": SECURITY}}}
