"""Test clients of the loopback servers a test starts, all on one TLS context.

httpx builds a TLS context for every client it makes and loads the CA bundle into it, about
50 ms of CPU a client (the openai SDK's clients are httpx's). The suite makes hundreds of
clients of servers that speak plain HTTP on loopback and never use it: each takes this one
context instead (`verify=LOOPBACK_TLS`; the SDK's through `sdk(...)`)."""

from __future__ import annotations

import ssl

import openai

LOOPBACK_TLS = ssl.create_default_context()


def sdk(base_url: str, api_key: str, *, headers: dict[str, str] | None = None
        ) -> openai.AsyncOpenAI:
    """The openai SDK's async client of `base_url`, no retries, on LOOPBACK_TLS, sending
    `headers` with every request."""
    http = openai.DefaultAsyncHttpxClient(verify=LOOPBACK_TLS)
    return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0,
                              http_client=http, default_headers=headers)
