"""LiteLLM's Python SDK against Chatgate's /v1 for the reasoning cases: for a case tag, one
streamed and one whole `litellm.completion`, with the answer and the thinking an app on
LiteLLM would show (`content`, `reasoning_content`). Run for
tests/turn/openai/test_litellm_reasoning.py by litellm_worker.py, with the python of
LiteLLM's own venv, so it imports nothing of ours."""

from __future__ import annotations

from typing import Any

import litellm


def one_case(key: str, base: str, api_key: str, model: str) -> dict[str, Any]:
    messages = [{"role": "user", "content": f"[case:{key}] think about it"}]
    common: dict[str, Any] = {"model": f"openai/{model}", "api_base": base,
                              "api_key": api_key, "messages": messages, "num_retries": 0}
    streamed, thought = "", ""
    for chunk in litellm.completion(**common, stream=True):
        for choice in chunk.choices:
            streamed += choice.delta.content or ""
            thought += getattr(choice.delta, "reasoning_content", None) or ""
    whole = litellm.completion(**common).choices[0].message
    return {"key": key, "streamed": streamed, "streamedReasoning": thought,
            "whole": whole.content or "",
            "wholeReasoning": getattr(whole, "reasoning_content", None) or ""}

