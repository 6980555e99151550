"""LiteLLM's Python SDK kept running between the tests that drive it: importing litellm costs
about 5 s of CPU, which one process per test paid again each time. Started once per pytest
process by the `litellm_worker` fixture (conftest.py) with the python of LiteLLM's own venv,
so it imports nothing of ours.

Reads one job a line on stdin,
    {"client": "chat" | "reasoning", "base": ..., "api_key": ..., "model": ..., "keys": [...]}
and for each case tag writes the line that client's `one_case` makes (litellm_client.py,
litellm_reasoning.py), then one line that ends the job: {"job": "done"}, or
{"job": "failed", "error": <traceback>} once a call raised (the cases after it are not run).
It ends when stdin closes, at once: the interpreter's own teardown of what litellm imported
took seconds of CPU, and nothing is left to flush (each line is flushed as it is written)."""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

import litellm_client
import litellm_reasoning

CLIENTS: dict[str, Callable[[str, str, str, str], dict[str, Any]]] = {
    "chat": litellm_client.one_case, "reasoning": litellm_reasoning.one_case}


def write(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def main() -> None:
    for text in sys.stdin:
        job = json.loads(text)
        one_case = CLIENTS[job["client"]]
        try:
            for key in job["keys"]:
                write(one_case(key, job["base"], job["api_key"], job["model"]))
        except Exception:
            write({"job": "failed", "error": traceback.format_exc()})
        else:
            write({"job": "done"})
    os._exit(0)


if __name__ == "__main__":
    main()
