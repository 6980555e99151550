"""LiteLLM's `completion()` over every public reasoning case, on a gateway configured for the
case's reasoning format: streamed and whole, the answer and the thinking are exactly the
spec's. A whole reply without thinking says `reasoning_content: null`; without that key
LiteLLM runs its own `<think>` parsing over `content` and cuts literal text the filter judged
to be answer (the `none` format's tags, other tag names)."""

from __future__ import annotations

import json

import pytest

from tests.support.gateway import InProcessGateway
from tests.turn.openai.model_server import ModelServer
from tests.turn.openai.outside_clients import JobProcess
from tests.turn.openai.test_litellm_client import run_litellm
from tests.turn.openai.test_reasoning_formats import cases_of, formatted
from tests.turn.openai.test_reasoning_surfaces import prepare

__all__ = ["formatted"]  # the fixture, one gateway per reasoning format


@pytest.fixture(scope="module")
def live_backend() -> str:
    """One database is enough: what LiteLLM sees on the wire does not depend on it."""
    return "sqlite"


async def test_litellm_gets_every_reasoning_case_exact(
    formatted: tuple[str, InProcessGateway], model_server: ModelServer,
    litellm_worker: JobProcess
) -> None:
    fmt, gateway = formatted
    keys = {prepare(model_server, case, f"litellm-{fmt}"): case for case in cases_of(fmt)}
    result = run_litellm(litellm_worker, "reasoning", gateway.url + "/v1",
                         await gateway.api_key(f"litellm-{fmt}"), list(keys))
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert sorted(line["key"] for line in lines) == sorted(keys)
    for line in lines:
        case = keys[line["key"]]
        want = (case["text"], case["reasoning"])
        assert (line["streamed"], line["streamedReasoning"]) == want, case["id"]
        assert (line["whole"], line["wholeReasoning"]) == want, case["id"]
