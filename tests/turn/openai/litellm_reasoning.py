"""LiteLLM's Python SDK against Chatgate's /v1 for the reasoning cases: for each case tag
given, one streamed and one whole `litellm.completion`; writes one JSON line per case with the
answer and the thinking an app on LiteLLM would show (`content`, `reasoning_content`). Run by
tests/turn/openai/test_litellm_reasoning.py with the python of LiteLLM's own venv, so it
imports nothing of ours."""

from __future__ import annotations

import json
import os
import sys
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


def main() -> None:
    base, api_key = os.environ["CHATGATE_BASE_URL"], os.environ["CHATGATE_API_KEY"]
    model = os.environ["CHATGATE_MODEL"]
    for key in json.loads(os.environ["CHATGATE_CASE_KEYS"]):
        sys.stdout.write(json.dumps(one_case(key, base, api_key, model)) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
