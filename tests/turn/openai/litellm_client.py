"""LiteLLM's Python SDK against Chatgate's /v1 as an OpenAI-compatible base: for a case tag,
one streamed and one whole `litellm.completion`, and what an app on LiteLLM would show of
them. Run for tests/turn/openai/test_litellm_client.py by litellm_worker.py, with the python
of LiteLLM's own venv (scripts/test_clients.sh), so it imports nothing of ours."""

from __future__ import annotations

from typing import Any

import litellm


def extension(obj: Any) -> Any:
    """LiteLLM keeps a response's unknown top-level fields as attributes."""
    return getattr(obj, "chatgate", None)


def one_case(key: str, base: str, api_key: str, model: str) -> dict[str, Any]:
    messages = [{"role": "user", "content": f"[case:{key}] answer the case"}]
    common: dict[str, Any] = {"model": f"openai/{model}", "api_base": base,
                              "api_key": api_key, "messages": messages, "num_retries": 0}
    streamed, ext, usage = "", None, None
    for chunk in litellm.completion(**common, stream=True,
                                    stream_options={"include_usage": True}):
        for choice in chunk.choices:
            streamed += choice.delta.content or ""
        if chunk.choices and extension(chunk) is not None:
            ext = extension(chunk)
        if getattr(chunk, "usage", None) is not None:
            usage = chunk.usage.model_dump()
    whole = litellm.completion(**common)
    whole_ext = extension(whole) or {}
    return {"key": key, "streamed": streamed, "metadata": (ext or {}).get("response_metadata"),
            "warnings": (ext or {}).get("warnings"), "usage": usage,
            "whole": whole.choices[0].message.content,
            "wholeMetadata": whole_ext.get("response_metadata"),
            "wholeWarnings": whole_ext.get("warnings"),
            "wholeUsage": whole.usage.model_dump() if whole.usage else None}

