"""The OpenAI Responses API's stored conversations, over the completion service
(app.turn.run.completion): a response is an assistant message, its id `resp_<message id in hex>`.

    call = await open_response(gate, principal, request, store=True, previous=None)
    answer = await stored_answer(deps, user_id, message_id)        # GET /v1/responses/{id}

`store` (the API's default) keeps the exchange as a Chatgate thread: a new thread, or with
`previous` the thread of that earlier response, whose messages up to it are the history the
model is shown (folded into MSG_CONTEXT with their times, as a native turn's). Without
`store`, only the usage is recorded, as for a chat completion without a thread. No table of
its own: a response is its message, so the page, the messages API and usage all see it."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from app.keys.service import Principal
from app.kit.shield import run_shielded
from app.store.db import Database
from app.threads import repository as thread_store
from app.turn.admission.gate import TurnGate
from app.turn.admission.opening import CONTEXT_HISTORY_LIMIT
from app.turn.rows import HistoryRow, TurnRows
from app.turn.run.completion import (
    CompletionCall,
    CompletionFailed,
    CompletionRequest,
    ModelNotFound,
    offered_models,
    open_completion,
)


class PreviousResponseNotFound(Exception):
    """`previous_response_id` names no stored response of this user."""


@dataclass(frozen=True)
class StoredAnswer:
    """An assistant message as a stored response."""

    id: uuid.UUID
    thread_id: uuid.UUID
    created_at: dt.datetime
    status: str
    content: str
    metadata: dict[str, Any]
    #: The answer's visible reasoning (its own column), None without any.
    reasoning: str | None = None


def response_id(message_id: uuid.UUID) -> str:
    return f"resp_{message_id.hex}"


async def open_response(gate: TurnGate, principal: Principal, request: CompletionRequest, *,
                        store: bool, previous: uuid.UUID | None) -> CompletionCall:
    """The call, opened with the completion service's limits and refusals. Raises
    PreviousResponseNotFound too. A thread made for it is removed again when the call is
    refused before its rows were stored: a refused request stores nothing."""
    deps = gate.deps
    if request.model not in offered_models(deps):
        raise ModelNotFound(request.model)
    thread_id: uuid.UUID | None = None
    if previous is not None:
        thread_id, history, times = await _continuation(deps.rows, principal.user_id, previous)
        request = dataclasses.replace(request, messages=[*history, *request.messages],
                                      times=times, follows=previous)
    made = None
    if store and thread_id is None:
        made = thread_id = await deps.rows.new_thread(principal.user_id, origin="responses")
    try:
        return await open_completion(gate, principal, request, thread_id if store else None)
    except CompletionFailed:
        raise  # its rows were stored, failed: the thread shows why
    except BaseException:
        if made is not None:
            await run_shielded(deps.rows.drop_thread(principal.user_id, made))
        raise


async def stored_answer(db: Database, user_id: str, message_id: uuid.UUID
                        ) -> StoredAnswer | None:
    """The user's assistant message by id; None for another user's, a user message or none."""
    async with db.transaction(read_only=True) as session:
        message = await thread_store.get_message(session, user_id, message_id)
    if message is None or message.role != "assistant":
        return None
    return StoredAnswer(message.id, message.thread_id, message.created_at, message.status,
                        message.content, dict(message.meta or {}), message.reasoning)


async def _continuation(rows: TurnRows, user_id: str, previous: uuid.UUID
                        ) -> tuple[uuid.UUID, list[dict[str, Any]], tuple[dt.datetime, ...]]:
    """The thread of the earlier response and its messages up to that response, in the chat
    shape with their times: what a native turn's history would hold (the turn repository's
    history_until), an answer that was only a tool call with its calls, so that a
    `function_call_output` can follow it."""
    found = await rows.history_until(user_id, previous, limit=CONTEXT_HISTORY_LIMIT)
    if found is None:
        raise PreviousResponseNotFound(str(previous))
    thread_id, history = found
    return thread_id, [_as_chat(row) for row in history], tuple(r.created_at for r in history)


def _as_chat(row: HistoryRow) -> dict[str, Any]:
    chat: dict[str, Any] = {"role": row.role, "content": row.content or None}
    if row.tool_calls:
        chat["tool_calls"] = row.tool_calls
    return chat
