"""LiteLLM's Python SDK against Chatgate's /v1 as an OpenAI-compatible base: for each case tag
given, one streamed and one whole `litellm.completion`; writes one JSON line per case with
what an app on LiteLLM would show. Run by tests/turn/openai/test_litellm_client.py with
the python of LiteLLM's own venv (scripts/test_clients.sh), so it imports nothing of ours."""

from __future__ import annotations

import json
import os
import sys
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


def main() -> None:
    base, api_key = os.environ["CHATGATE_BASE_URL"], os.environ["CHATGATE_API_KEY"]
    model = os.environ["CHATGATE_MODEL"]
    for key in json.loads(os.environ["CHATGATE_CASE_KEYS"]):
        sys.stdout.write(json.dumps(one_case(key, base, api_key, model)) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
