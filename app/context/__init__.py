"""MSG_CONTEXT building: the conversation history the model sees, encoded so that nothing a
user writes can close or forge a marker. Pure: no I/O."""

from app.context.builder import (
    ContextItem,
    build_msg_context,
    build_upstream_messages,
    encode_context_json,
    escape_user_text,
    select_within_budget,
)

__all__ = [
    "ContextItem",
    "build_msg_context",
    "build_upstream_messages",
    "encode_context_json",
    "escape_user_text",
    "select_within_budget",
]
