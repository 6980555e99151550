"""The OpenAI-compatible upstream: one shared httpx.AsyncClient under an AsyncOpenAI client."""

from app.upstream.client import (
    ChatChunk,
    Completion,
    ProviderUsage,
    UpstreamClient,
    UpstreamStream,
    make_http_client,
    make_openai_client,
)
from app.upstream.errors import UpstreamError

__all__ = [
    "ChatChunk",
    "Completion",
    "ProviderUsage",
    "UpstreamClient",
    "UpstreamError",
    "UpstreamStream",
    "make_http_client",
    "make_openai_client",
]
