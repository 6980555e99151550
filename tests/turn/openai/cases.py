"""The public conformance cases, each prepared on the scripted model server as a streamed
answer cut at random places (seeded by the case, so a failure replays)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from tests.stream.streaming import random_pieces
from tests.turn.openai.model_server import ModelServer, answer_body

CONFORMANCE = Path(__file__).resolve().parents[2] / "stream" / "conformance" / "markers.jsonl"
CASES: list[dict[str, Any]] = [
    json.loads(line) for line in CONFORMANCE.read_text(encoding="utf-8").splitlines() if line]


def prepare(server: ModelServer, case: dict[str, Any], salt: str) -> str:
    """The tag a request carries to get this case's answer, cut its own random way."""
    key = f"{case['id']}.{salt}"
    rng = random.Random(key)
    server.bodies[key] = answer_body(random_pieces(case["input"], rng, 12))
    return key


def ask(key: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"[case:{key}] answer the case"}]


def expected(case: dict[str, Any]) -> tuple[str, Any, list[str]]:
    return case["text"], case["metadata"] or {}, case["warnings"]
