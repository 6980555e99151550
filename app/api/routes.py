"""The gateway's HTTP routes."""

from __future__ import annotations

from starlette.routing import BaseRoute, Route

from app.api import autonomy, events, health, metrics, threads, turns
from app.api.usage import usage_routes


def api_routes() -> list[BaseRoute]:
    return [
        Route("/healthz", health.healthz, methods=["GET"]),
        Route("/readyz", health.readyz, methods=["GET"]),
        Route("/metrics", metrics.metrics, methods=["GET"]),
        Route("/api/threads", threads.create_thread, methods=["POST"]),
        Route("/api/threads", threads.list_threads, methods=["GET"]),
        Route("/api/threads/{thread_id}/messages", threads.thread_messages, methods=["GET"]),
        Route("/api/threads/{thread_id}/messages", turns.post_message, methods=["POST"]),
        Route("/api/threads/{thread_id}", threads.delete_thread, methods=["DELETE"]),
        Route("/api/threads/{thread_id}", autonomy.patch_thread, methods=["PATCH"]),
        Route("/api/threads/{thread_id}/events", events.thread_events_stream, methods=["GET"]),
        *usage_routes(),
    ]
