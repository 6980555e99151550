"""The building blocks of the OpenAPI document: schema helpers, the two error shapes, and an
operation with its refusals. Each refusal is listed by status, with the shape of its API:
`{"error": {"code", "message"}}` on the native routes, OpenAI's `{"error": {"message",
"type", "param", "code"}}` under `/v1`, Anthropic's `{"type": "error", "error": {"type",
"message"}}` on its Messages API."""

from __future__ import annotations

from typing import Any, Literal

Schema = dict[str, Any]
Api = Literal["native", "openai", "anthropic"]

JSON = "application/json"
SSE = "text/event-stream"
CSV = "text/csv"
#: A timestamp as the gateway writes it (`2026-11-22T19:22:37.547Z`).
TIMESTAMP: Schema = {"type": "string", "format": "date-time"}
DAY: Schema = {"type": "string", "format": "date"}
UUID: Schema = {"type": "string", "format": "uuid"}
TEXT: Schema = {"type": "string"}
INTEGER: Schema = {"type": "integer"}
COUNT: Schema = {"type": "integer", "minimum": 0}
NUMBER: Schema = {"type": "number"}
BOOLEAN: Schema = {"type": "boolean"}
ANY_OBJECT: Schema = {"type": "object"}


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def array(items: Schema, **limits: Any) -> Schema:
    return {"type": "array", "items": items, **limits}


def obj(required: dict[str, Schema] | None = None, optional: dict[str, Schema] | None = None,
        *, closed: bool = False, description: str | None = None) -> Schema:
    """An object with these members; `closed`: no others (a request body the gateway
    refuses with a 422 for an unknown field)."""
    schema: Schema = {"type": "object", "properties": {**(required or {}), **(optional or {})}}
    if required:
        schema["required"] = list(required)
    if closed:
        schema["additionalProperties"] = False
    if description:
        schema["description"] = description
    return schema


ERROR_SCHEMAS: dict[str, Schema] = {
    "NativeError": obj({"error": obj({"code": TEXT, "message": TEXT}, closed=True)},
                       closed=True, description="A refusal of a native route: `code` is "
                                                "stable, `message` one sentence."),
    "OpenAIError": obj({"error": obj({"message": TEXT, "type": TEXT,
                                      "param": nullable(TEXT), "code": nullable(TEXT)},
                                     closed=True)},
                       closed=True, description="A refusal of a `/v1` route in OpenAI's "
                                                "shape; `param` names the field at fault."),
    "AnthropicError": obj({"type": {"const": "error"},
                           "error": obj({"type": TEXT, "message": TEXT}, closed=True)},
                          closed=True, description="A refusal of the Messages API in "
                                                   "Anthropic's shape; the message names the "
                                                   "field at fault."),
}

_SHAPES = {"native": "NativeError", "openai": "OpenAIError", "anthropic": "AnthropicError"}

#: What each refusal's status means, the same on both APIs (docs/api.md, Bad input).
STATUS_TEXT: dict[int, str] = {
    400: "Malformed input: a body that is not JSON or is past the JSON limits (64-bit "
         "integers, finite numbers, 64 levels, 10,000 items; the field named), a field of "
         "the wrong shape, a bad `Last-Event-ID`.",
    401: "Missing, wrong or revoked API key.",
    403: "The key may not do this: an admin route, or a model the key is not allowed.",
    404: "Not found: an unknown, malformed or another user's id (the same answer for each).",
    409: "Conflict: the thread is already streaming an answer, or the resume cannot be "
         "served here.",
    410: "The events after `Last-Event-ID` are no longer kept.",
    413: "The body or the message content is too long.",
    415: "The body is not declared `Content-Type: application/json`.",
    422: "A field or query parameter the gateway refuses (its code names the rule).",
    429: "A limit: the rate limit, the streams per user, or the key's daily budget "
         "(`Retry-After` says when to try again).",
    502: "The model server failed, cut its answer, sent something unreadable, or could not "
         "be reached.",
    503: "The database is unavailable, no upstream slot freed in time, or the gateway is "
         "busy (`Retry-After` says when to try again).",
    504: "The model server was too slow.",
}


def json_response(description: str, schema: Schema) -> Schema:
    return {"description": description, "content": {JSON: {"schema": schema}}}


def sse_event(names: Schema | None) -> Schema:
    """One event of an SSE response, as a client parses its frame: `data` (a JSON text, or
    `[DONE]`), its `event` name (`names`: the schema of the names; None: a stream of
    `data:` lines alone, as OpenAI's chat stream, whose events a parser names `message`,
    SSE's default) and an `id` on the events a resume counts. Comment lines (keep-alive
    pings) are no events."""
    return obj({"data": TEXT, "event": {"const": "message"} if names is None else names},
               {"id": {"type": "string", "pattern": r"^\d+$"}})


def event_stream(description: str, events: list[str]) -> Schema:
    """A native SSE response whose events are among `events` (docs/api.md)."""
    names = {"type": "string", "enum": events}
    return {"description": description, "content": {SSE: {"schema": sse_event(names)}}}


def errors(api: Api, *statuses: int) -> dict[str, Schema]:
    shape = ref(_SHAPES[api])
    return {str(status): json_response(STATUS_TEXT[status], shape) for status in statuses}


def operation(api: Api, operation_id: str, summary: str, *, tag: str,
              responses: dict[str, Schema], refusals: tuple[int, ...] = (),
              parameters: list[Schema] | None = None, body: Schema | None = None,
              body_required: bool = True, secured: bool = True,
              description: str | None = None) -> Schema:
    """One operation. A secured one may also be refused with 401 and, since it reads the
    database, 503."""
    statuses = set(refusals) | ({401, 503} if secured else set())
    op: Schema = {"operationId": operation_id, "summary": summary, "tags": [tag],
                  "responses": {**responses, **errors(api, *sorted(statuses))}}
    if description:
        op["description"] = description
    if parameters:
        op["parameters"] = parameters
    if body is not None:
        op["requestBody"] = {"required": body_required,
                             "content": {JSON: {"schema": body}}}
    if not secured:
        op["security"] = []
    return op


def path_parameter(name: str, schema: Schema, description: str) -> Schema:
    return {"name": name, "in": "path", "required": True, "schema": schema,
            "description": description}


def query_parameter(name: str, schema: Schema, description: str) -> Schema:
    return {"name": name, "in": "query", "required": False, "schema": schema,
            "description": description}


def header_parameter(name: str, schema: Schema, description: str) -> Schema:
    return {"name": name, "in": "header", "required": False, "schema": schema,
            "description": description}
