"""Real clients the tests run outside pytest's process (node's openai, LiteLLM in its own venv),
each printing one JSON line per conformance case.

When such a client is missing the test skips, loudly, on a developer's machine; under CI
(CI=true or CHATGATE_REQUIRE_BROWSER=1) it fails, so a broken install never passes as green."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, NoReturn

import pytest

from tests.turn.openai.cases import CASES


def required() -> bool:
    return (os.environ.get("CI", "").lower() == "true"
            or os.environ.get("CHATGATE_REQUIRE_BROWSER") == "1")


def missing_client(message: str) -> NoReturn:
    if required():
        pytest.fail(message + " (required under CI)")
    print(f"\n*** SKIPPED: {message} ***", file=sys.stderr)
    pytest.skip(message)


def case_lines(result: subprocess.CompletedProcess[str],
               keys: dict[str, dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each case with the line the client printed for it; every case answered once."""
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert sorted(line["key"] for line in lines) == sorted(keys)
    assert len(lines) == len(CASES)
    return [(keys[line["key"]], line) for line in lines]
