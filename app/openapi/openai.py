"""The OpenAI-compatible routes in the OpenAPI document: chat completions, the Responses API
and the models. The request schemas hold what the gateway itself reads and refuses (each
refusal a 400 naming its `param`); every other field passes as OpenAI defines it."""

from __future__ import annotations

from app.answer.choices import MAX_CHOICES
from app.openapi.schemas import (
    ANY_OBJECT,
    BOOLEAN,
    COUNT,
    INTEGER,
    JSON,
    NUMBER,
    SSE,
    TEXT,
    UUID,
    Schema,
    array,
    errors,
    header_parameter,
    json_response,
    nullable,
    obj,
    operation,
    path_parameter,
    query_parameter,
    sse_event,
)
from app.turn.openai.chat_request import ROLES
from app.turn.openai.errors import THREAD_HEADER

#: The methods the catch-all answers (HEAD goes with GET, as on every route).
UNKNOWN_ROUTE_METHODS = ("get", "put", "post", "delete", "options", "patch")
#: Every refusal a call may get: its body, its key, its limits, the model server's.
CALL_REFUSALS = (400, 403, 404, 409, 413, 415, 422, 429, 502, 504)
_TEXT_PART_TYPES = ["input_text", "output_text", "text", "refusal"]
_MODEL = {"type": "string", "minLength": 1, "description": "One of `GET /v1/models`."}


def _usage() -> Schema:
    return obj({"prompt_tokens": COUNT, "completion_tokens": COUNT, "total_tokens": COUNT},
               {"completion_tokens_details": obj({"reasoning_tokens": COUNT})})


def _input_item() -> Schema:
    text_part = obj({"type": {"type": "string", "enum": _TEXT_PART_TYPES}, "text": TEXT})
    image_part = obj({"type": {"const": "input_image"}, "image_url": TEXT})
    return {"anyOf": [
        obj({"role": {"type": "string", "enum": ["user", "assistant", "system", "developer"]},
             "content": {"anyOf": [TEXT, array({"anyOf": [text_part, image_part]})]}},
            {"type": {"const": "message"}}),
        obj({"type": {"const": "function_call"}, "call_id": TEXT, "name": TEXT,
             "arguments": TEXT}),
        obj({"type": {"const": "function_call_output"}, "call_id": TEXT,
             "output": {"anyOf": [TEXT, array(ANY_OBJECT)]}}),
        obj({"type": {"const": "reasoning"}}),
        obj({"type": {"const": "item_reference"},
             "id": {"type": "string", "pattern": "^(msg|rs|fc)_",
                    "description": "An item of an earlier stored response of the key's user: "
                                   "a message is its stored clean text, a reasoning item "
                                   "nothing (thinking is never sent back), a function call "
                                   "the call. Any other id is a 400."}}),
    ]}


def _asks_something(request: Schema) -> Schema:
    """What the gateway asks of `input`: a user message, or with `previous_response_id` a
    tool's output (a tool round continued)."""
    def holding(kind: Schema) -> Schema:
        return {"properties": {"input": {"anyOf": [
            {"type": "string"}, {"type": "array", "contains": kind}]}}}

    user = obj({"role": {"const": "user"}})
    output = obj({"type": {"const": "function_call_output"}})
    return {**request, "anyOf": [
        holding(user), {**holding(output), "required": ["previous_response_id"]}]}


def schemas() -> dict[str, Schema]:
    content_part = obj({"type": TEXT}, {"text": TEXT},
                       description="A `text` part needs a string `text`.")
    content = {"anyOf": [TEXT, array(content_part)]}
    chat_message = {"anyOf": [
        obj({"role": {"type": "string", "enum": sorted(ROLES - {"assistant"})},
             "content": content}, {"name": TEXT}),
        obj({"role": {"const": "assistant"}},
            {"content": nullable(content), "name": TEXT, "tool_calls": array(ANY_OBJECT)}),
    ], "description": "`content` may be absent or null for an assistant's tool call only."}
    return {
        "ChatMessage": chat_message,
        "ChatCompletionRequest": obj(
            {"model": _MODEL,
             "messages": {**array({"$ref": "#/components/schemas/ChatMessage"}, minItems=1),
                          "contains": obj({"role": {"const": "user"}})}},
            {"n": nullable({"type": "integer", "minimum": 1, "maximum": MAX_CHOICES}),
             "stream": nullable(BOOLEAN),
             "stream_options": nullable(obj(optional={"include_usage": BOOLEAN})),
             "temperature": NUMBER, "max_tokens": INTEGER, "seed": INTEGER,
             "tools": array(ANY_OBJECT)},
            description="Every other field goes to the model server as it came."),
        "ChatCompletion": obj({
            "id": TEXT, "object": {"const": "chat.completion"}, "created": INTEGER,
            "model": TEXT,
            "choices": array(obj({"index": COUNT,
                                  "message": obj({"role": {"const": "assistant"},
                                                  "content": nullable(TEXT)},
                                                 {"reasoning_content": nullable(TEXT),
                                                  "tool_calls": array(ANY_OBJECT)}),
                                  "finish_reason": TEXT})),
            "usage": _usage(), "chatgate": ANY_OBJECT}),
        "Model": obj({"id": TEXT, "object": {"const": "model"}, "created": INTEGER,
                      "owned_by": TEXT}),
        "ModelList": obj({"object": {"const": "list"},
                          "data": array({"$ref": "#/components/schemas/Model"})}),
        "ResponseRequest": _asks_something(obj(
            {"model": _MODEL,
             "input": {"anyOf": [{"type": "string", "minLength": 1},
                                 array(_input_item(), minItems=1)]}},
            {"instructions": nullable(TEXT), "stream": nullable(BOOLEAN),
             "store": nullable(BOOLEAN), "previous_response_id": nullable(TEXT),
             "max_output_tokens": nullable({"type": "integer", "minimum": 1}),
             "temperature": nullable(NUMBER), "top_p": nullable(NUMBER),
             "tools": nullable(array(obj({"type": {"const": "function"}, "name": TEXT},
                                         {"description": TEXT, "parameters": ANY_OBJECT,
                                          "strict": BOOLEAN}))),
             "tool_choice": {"anyOf": [TEXT, obj({"type": {"const": "function"},
                                                  "name": TEXT}), {"type": "null"}]},
             "text": nullable(obj(optional={"format": nullable(obj({"type": {
                 "type": "string", "enum": ["text", "json_object", "json_schema"]}}))}))},
            description="Fields not listed here are not sent to the model server.")),
        "Response": obj({
            "id": {"type": "string", "pattern": "^resp_"}, "object": {"const": "response"},
            "created_at": INTEGER,
            "status": {"type": "string",
                       "enum": ["completed", "incomplete", "in_progress", "failed"]},
            "error": nullable(ANY_OBJECT), "incomplete_details": nullable(ANY_OBJECT),
            "model": TEXT, "output": array(ANY_OBJECT),
            "usage": nullable(obj({"input_tokens": COUNT, "output_tokens": COUNT,
                                   "total_tokens": COUNT}))},
            {"chatgate": ANY_OBJECT}),
        "ResponseItemList": obj({
            "object": {"const": "list"},
            "data": array(obj({"id": {"type": "string", "pattern": "^msg_"},
                               "type": {"const": "message"}, "role": TEXT,
                               "status": TEXT, "content": array(ANY_OBJECT)})),
            "first_id": nullable(TEXT), "last_id": nullable(TEXT), "has_more": BOOLEAN}),
        "ResponseDeleted": obj({"id": {"type": "string", "pattern": "^resp_"},
                                "object": {"const": "response"}, "deleted": {"const": True}}),
    }


def _whole_or_stream(schema: str, stream: str, events: Schema | None) -> Schema:
    return {"description": f"A whole reply, or with `stream: true` {stream}",
            "content": {JSON: {"schema": {"$ref": f"#/components/schemas/{schema}"}},
                        SSE: {"schema": sse_event(events)}}}


_RESPONSE_ID = path_parameter("response_id", TEXT, "`resp_` and its message's id in hex.")
_PAGE = [
    query_parameter("order", {"type": "string", "enum": ["asc", "desc"]},
                    "`desc` (the default): newest first."),
    query_parameter("limit", {"type": "integer", "minimum": 1, "maximum": 100},
                    "Items per page, 20 by default."),
    query_parameter("after", TEXT, "An item id of the list: the items past it."),
    query_parameter("before", TEXT, "An item id of the list: the items just ahead of it."),
]


def paths() -> dict[str, Schema]:
    unknown = {
        method: {**operation("openai", f"unknownRoute{method.capitalize()}",
                             "Any other path under /v1", tag="openai", secured=False,
                             description="OpenAI's 404 `unknown_url` for every method, never "
                                         "a 405; at any depth of path.",
                             responses=errors("openai", 404))}
        for method in UNKNOWN_ROUTE_METHODS}
    return {
        "/v1/chat/completions": {"post": operation(
            "openai", "createChatCompletion", "OpenAI's chat completions", tag="openai",
            body={"$ref": "#/components/schemas/ChatCompletionRequest"},
            refusals=CALL_REFUSALS,
            parameters=[header_parameter(THREAD_HEADER, UUID,
                                         "Store the exchange in this thread of the user's.")],
            responses={"200": _whole_or_stream(
                "ChatCompletion", "`data:` lines of `chat.completion.chunk` objects, then "
                "`data: [DONE]` (a failure: a last `data: {\"error\": ...}`).", None)})},
        "/v1/responses": {"post": operation(
            "openai", "createResponse", "OpenAI's Responses API", tag="openai",
            body={"$ref": "#/components/schemas/ResponseRequest"}, refusals=CALL_REFUSALS,
            responses={"200": _whole_or_stream(
                "Response", "`event:` and `data:` frames from `response.created` to "
                "`response.completed`, `response.incomplete` or `response.failed`.",
                {"type": "string", "pattern": r"^(response\.[a-z_.]+|error)$"})})},
        "/v1/responses/{response_id}": {
            "parameters": [_RESPONSE_ID],
            "get": operation(
                "openai", "getResponse", "A stored response", tag="openai", refusals=(404,),
                responses={"200": json_response("The response.",
                                                {"$ref": "#/components/schemas/Response"})}),
            "delete": operation(
                "openai", "deleteResponse", "Delete a stored response", tag="openai",
                refusals=(404, 409),
                description="The response and its question go; its thread too when nothing "
                            "else is left in it. 409 while it is still being written.",
                responses={"200": json_response(
                    "Deleted.", {"$ref": "#/components/schemas/ResponseDeleted"})})},
        "/v1/responses/{response_id}/input_items": {"get": operation(
            "openai", "listResponseInputItems", "A stored response's input", tag="openai",
            refusals=(400, 404), parameters=[_RESPONSE_ID, *_PAGE],
            description="The stored question the response was asked with (a request's "
                        "last user message: the earlier input is not kept), newest first "
                        "by default.",
            responses={"200": json_response(
                "One page of the items.", {"$ref": "#/components/schemas/ResponseItemList"})})},
        "/v1/responses/{response_id}/cancel": {"post": operation(
            "openai", "cancelResponse", "Cancel a background response", tag="openai",
            refusals=(400, 404), parameters=[_RESPONSE_ID],
            description="No response runs in the background here: a stored response is "
                        "400 `Cannot cancel a synchronous response.`, as OpenAI answers for "
                        "a response not created with `background: true`.",
            responses={"200": json_response("Never: nothing to cancel.",
                                            {"$ref": "#/components/schemas/Response"})})},
        "/v1/models": {"get": operation(
            "openai", "listOpenAIModels", "The models", tag="openai",
            responses={"200": json_response("The models.",
                                            {"$ref": "#/components/schemas/ModelList"})})},
        "/v1/models/{model}": {"get": operation(
            "openai", "getOpenAIModel", "One model", tag="openai", refusals=(404,),
            description="May answer 404 for a model the key may not use.",
            parameters=[path_parameter("model", {"type": "string", "minLength": 1},
                                       "The model's name (it may hold slashes).")],
            responses={"200": json_response("The model.",
                                            {"$ref": "#/components/schemas/Model"})})},
        "/v1/{rest}": {"parameters": [path_parameter(
            "rest", {"type": "string", "minLength": 1},
            "Any path no other `/v1` route takes.")], **unknown},
    }
