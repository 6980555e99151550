"""The OpenAI-compatible upstream: one shared httpx.AsyncClient, for the streamed calls and
under the AsyncOpenAI client of the short ones."""

from app.upstream.client import (
    UpstreamClient,
    UpstreamConfig,
    UpstreamStream,
    make_http_client,
    make_openai_client,
)
from app.upstream.errors import UpstreamError

__all__ = [
    "UpstreamClient",
    "UpstreamConfig",
    "UpstreamError",
    "UpstreamStream",
    "make_http_client",
    "make_openai_client",
]
