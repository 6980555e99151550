"""The gateway's OpenAPI 3.1 document, built from the modules that describe each API.

Built in Python rather than kept as a JSON or YAML file: every operation shares the same
refusals in one of two error shapes, which a helper writes once (app.openapi.schemas); the
limits are the code's own constants (the content limit is the running gateway's setting);
and mypy and ruff read it like the rest of the code. tests/openapi holds it to the route
table, and a schema-based fuzz holds the running gateway to it."""

from __future__ import annotations

from typing import Any

from app.api.json_limits import MAX_DEPTH, MAX_ITEMS, MAX_KEY_CHARS
from app.openapi import anthropic, native, openai
from app.openapi.schemas import ERROR_SCHEMAS

OPENAPI_VERSION = "3.1.0"

DESCRIPTION = f"""\
A streaming chat gateway: the native API (`/api/...`, Server-Sent Events), the
OpenAI-compatible one (`/v1/...`) and Anthropic's Messages API (`/v1/messages`).
docs/api.md says each route in prose.

Every JSON body, on every route, is held to the same limits before anything is stored,
billed or sent: integers within signed 64 bits, finite numbers (no `NaN` or `Infinity`),
at most {MAX_DEPTH} levels of arrays and objects, at most {MAX_ITEMS:,} items in an array
or members in an object, member names of at most {MAX_KEY_CHARS} characters. Past one, the
answer is a 400 naming the field by its path (`tools[0].function.parameters.x.maximum`): in
the message on the native routes, as `param` under `/v1`.

Refusals are `{{"error": {{"code", "message"}}}}` on the native routes and OpenAI's
`{{"error": {{"message", "type", "param", "code"}}}}` under `/v1`, and Anthropic's
`{{"type": "error", "error": {{"type", "message"}}}}` on `/v1/messages`. Every route answering GET
also answers HEAD."""


def document(*, max_content_chars: int = 32_000) -> dict[str, Any]:
    """The whole document; `max_content_chars` is the gateway's limit on a message."""
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": "Chatgate", "version": "0.1.0", "description": DESCRIPTION},
        "tags": [{"name": name, "description": text} for name, text in (
            ("threads", "A user's threads and their messages."),
            ("turns", "A turn: a message sent, its answer streamed, resumed or stopped."),
            ("usage", "Token usage and refusals; the admin reports need an admin key."),
            ("openai", "The OpenAI-compatible API."),
            ("anthropic", "Anthropic's Messages API."),
            ("process", "This gateway process: health, readiness, metrics, this document."),
        )],
        "security": [{"bearer": []}],
        "paths": {**native.paths(), **openai.paths(), **anthropic.paths()},
        "components": {
            "securitySchemes": {"bearer": {
                "type": "http", "scheme": "bearer",
                "description": "A key from scripts/keys.py (with auth off, any or none)."},
                "anthropicKey": {
                    "type": "apiKey", "in": "header", "name": "x-api-key",
                    "description": "The same key, as the anthropic SDKs send it (the "
                                   "Messages API only)."}},
            "schemas": {**ERROR_SCHEMAS, **native.schemas(max_content_chars),
                        **openai.schemas(), **anthropic.schemas()},
        },
    }
