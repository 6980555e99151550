"""The gateway's HTTP routes."""

from __future__ import annotations

from starlette.routing import BaseRoute, Route

from app.api import prometheus as metrics
from app.followups import endpoints as autonomy
from app.openapi import endpoints as openapi
from app.process import endpoints as health
from app.threads import endpoints as threads
from app.threads import events_endpoints as events
from app.turn.anthropic import endpoints as anthropic_messages
from app.turn.native import endpoints as turns
from app.turn.native import resume_endpoints as resume
from app.turn.openai import chat as openai_chat
from app.turn.openai import responses as openai_responses
from app.usage.endpoints import usage_routes

#: Every method a client may send to an unknown `/v1` route.
ANY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def api_routes() -> list[BaseRoute]:
    return [
        Route("/healthz", health.healthz, methods=["GET"]),
        Route("/readyz", health.readyz, methods=["GET"]),
        Route("/metrics", metrics.metrics, methods=["GET"]),
        Route("/openapi.json", openapi.openapi_json, methods=["GET"]),
        Route("/api/threads", threads.create_thread, methods=["POST"]),
        Route("/api/threads", threads.list_threads, methods=["GET"]),
        Route("/api/threads/{thread_id}/messages", threads.thread_messages, methods=["GET"]),
        Route("/api/threads/{thread_id}/messages", turns.post_message, methods=["POST"]),
        Route("/api/models", turns.list_models, methods=["GET"]),
        Route("/api/threads/{thread_id}/messages/{message_id}", turns.take_back_last_exchange,
              methods=["DELETE"]),
        Route("/api/threads/{thread_id}/messages/{message_id}/stream", resume.resume_stream,
              methods=["GET"]),
        Route("/api/threads/{thread_id}/messages/{message_id}/regenerate",
              turns.regenerate_answer, methods=["POST"]),
        Route("/api/threads/{thread_id}/messages/{message_id}/show", turns.show_version,
              methods=["POST"]),
        Route("/api/threads/{thread_id}/messages/{message_id}/continue", turns.continue_answer,
              methods=["POST"]),
        Route("/api/threads/{thread_id}/messages/{message_id}/stop", resume.stop_turn,
              methods=["POST"]),
        Route("/api/threads/{thread_id}", threads.delete_thread, methods=["DELETE"]),
        Route("/api/threads/{thread_id}", autonomy.patch_thread, methods=["PATCH"]),
        Route("/api/threads/{thread_id}/events", events.thread_events_stream, methods=["GET"]),
        *usage_routes(),
        Route("/v1/chat/completions", openai_chat.chat_completions, methods=["POST"]),
        Route("/v1/models", openai_chat.list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", openai_chat.get_model, methods=["GET"]),
        Route("/v1/responses", openai_responses.create_response, methods=["POST"]),
        Route("/v1/responses/{response_id}", openai_responses.get_response, methods=["GET"]),
        Route("/v1/responses/{response_id}", openai_responses.remove_response,
              methods=["DELETE"]),
        Route("/v1/responses/{response_id}/input_items", openai_responses.list_input_items,
              methods=["GET"]),
        Route("/v1/responses/{response_id}/cancel", openai_responses.cancel_response,
              methods=["POST"]),
        Route("/v1/messages", anthropic_messages.create_message, methods=["POST"]),
        Route("/v1/messages/count_tokens", anthropic_messages.count_tokens, methods=["POST"]),
        # every method: an unknown /v1 route is OpenAI's 404, never a 405
        Route("/v1/{rest:path}", openai_chat.unknown_route, methods=ANY_METHOD),
    ]
