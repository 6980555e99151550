"""The input tokens of a Messages request, estimated the way the gateway estimates a prompt
whose model server says nothing (app.answer.estimate: a token per 4 bytes of UTF-8, plus a
few per message): over the prompt the gateway would send, its own system prompt and the
MSG_CONTEXT history included, and the tools' JSON. `count_tokens` answers it; a stream's
`message_start` says it until the model server's own count comes in `message_delta`."""

from __future__ import annotations

import json

from app.answer.estimate import estimate_prompt_tokens, estimate_text_tokens
from app.config.catalog import ModelNotOffered, choose
from app.config.settings import Settings
from app.context.client_history import flat_prompt, upstream_messages, upstream_params
from app.keys.service import Principal
from app.turn.deps import TurnDeps
from app.turn.run.completion import CompletionRequest, ModelNotFound


def estimate_input_tokens(settings: Settings, request: CompletionRequest) -> int:
    prompt = upstream_messages(request.messages, system_prompt=settings.system_prompt,
                               budget_chars=settings.context_budget_chars)
    tools = upstream_params(request.params).get("tools")
    extra = estimate_text_tokens(json.dumps(tools, ensure_ascii=False)) if tools else 0
    return estimate_prompt_tokens(flat_prompt(prompt)) + extra


def count_input_tokens(deps: TurnDeps, principal: Principal,
                       request: CompletionRequest) -> int:
    """The estimate, for a model the key may use (ModelNotFound, ModelNotAllowed else)."""
    try:
        choose(deps.models.catalog, request.model, None, principal.allowed_models)
    except ModelNotOffered as exc:
        raise ModelNotFound(request.model) from exc
    return estimate_input_tokens(deps.settings, request)
