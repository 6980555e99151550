"""The demo model's thinking scenarios through a whole gateway (what `scripts/serve` shows):
the native stream's reasoning events, then its deltas, and the stored row, for each form of
thinking (docs/demo_scenarios.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.helpers import keyed_client, new_thread
from tests.e2e.helpers import messages as thread_messages
from tests.support.gateway import (
    DemoLlm,
    InProcessGateway,
    StartGateway,
    post_turn,
    start_demo_llm,
)


@pytest.fixture(scope="module")
def demo_llm() -> Iterator[DemoLlm]:
    """The session's demo model (and so the module's `gateway`) without the pause before
    each piece of thinking: its 30 ms a piece, there so that a page shows "Thinking…" a
    moment, made every turn here seconds of sleep, and nothing checked here depends on how
    long the thinking took."""
    demo = start_demo_llm(delay_ms=0, slow_first_s=1.5, think_ms=0)
    yield demo
    demo.stop()


async def think(gateway: InProcessGateway, scenario: str) -> tuple[Any, dict[str, Any]]:
    """One turn of `scenario`: (what the client saw, the stored assistant row)."""
    async with await keyed_client(gateway, "thinker") as client:
        thread_id = await new_thread(client)
        result = await post_turn(client, thread_id, f"Why is the sky blue? {scenario}")
        stored = (await thread_messages(client, thread_id))[-1]
    assert result.status_code == 200, result.raw
    return result, stored


def check_channels(result: Any, stored: dict[str, Any]) -> str:
    """Both channels as streamed are what is stored; reasoning comes before the answer.
    Returns the reasoning."""
    thought = "".join(e.data["text"] for e in result.of("reasoning"))
    assert stored["content"] == result.text and stored["reasoning"] == (thought or None)
    names = [n for n in result.names if n in ("reasoning", "delta")]
    assert names == sorted(names, key=lambda n: n == "delta")  # every reasoning event first
    assert "<think>" not in result.text and "</think>" not in result.text
    assert isinstance(stored["reasoning_ms"], int) and stored["reasoning_ms"] >= 0
    return thought


@pytest.mark.parametrize("scenario", ["[think]", "[think-field]"])
async def test_a_thinking_answer_streams_its_reasoning_apart(
    gateway: InProcessGateway, scenario: str
) -> None:
    result, stored = await think(gateway, scenario)
    thought = check_channels(result, stored)
    assert thought and stored["content"]
    assert stored["metadata"]["stream"]["warnings"] == []
    assert stored["metadata"]["response_metadata"]  # the answer's METADATA, not the thought's
    [main] = [c for c in stored["metadata"]["processingDetails"]["llm_calls"]
              if c["stage"] == "main"]
    counted = main["response"]["usage"]["completion_tokens_details"]["reasoning_tokens"]
    assert result.one("usage")["reasoning_tokens"] == counted > 0  # the server's count


async def test_thinking_that_never_closes_is_all_reasoning(gateway: InProcessGateway) -> None:
    result, stored = await think(gateway, "[think-unclosed]")
    assert check_channels(result, stored) and stored["content"] == ""
    assert stored["metadata"]["stream"]["warnings"] == ["reasoning_unclosed"]


async def test_markers_in_the_thinking_are_removed_and_reported(
    gateway: InProcessGateway,
) -> None:
    result, stored = await think(gateway, "[think-markers]")
    thought = check_channels(result, stored)
    assert thought.startswith("Draft:  no, the answer is in English.")
    assert "METADATA" not in thought
    assert stored["metadata"]["stream"]["warnings"] == ["markers_in_reasoning"]
    assert stored["metadata"]["response_metadata"].get("language") != "de"


async def test_a_prefilled_template_needs_its_format(
    start_gateway: StartGateway, live_backend: str, demo_llm: DemoLlm, gateway: InProcessGateway
) -> None:
    """Without the opener, only `think-prefilled` knows the text began inside the thinking."""
    prefilled = start_gateway(live_backend, upstream=demo_llm,
                              env={"CHATGATE_REASONING_FORMAT": "think-prefilled"})
    result, stored = await think(prefilled, "[think-prefilled]")
    assert check_channels(result, stored) and stored["content"]
    assert stored["metadata"]["stream"]["warnings"] == []
    plain, row = await think(gateway, "[think-prefilled]")  # the default format: text
    assert plain.of("reasoning") == [] and "</think>" in row["content"]
