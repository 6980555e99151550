"""Every public reasoning case through the anthropic Python SDK, on a gateway configured for
the case's reasoning format: `messages.create` streamed shows the reasoning as one `thinking`
block (`thinking_delta`s) ahead of the text, the whole message carries it as a `thinking`
block, and `messages.stream`'s final message agrees; an answer without reasoning has no
thinking block."""

from __future__ import annotations

from typing import Any

import anthropic

from tests.support.gateway import InProcessGateway
from tests.turn.openai.model_server import ModelServer
from tests.turn.openai.test_reasoning_formats import cases_of, formatted
from tests.turn.openai.test_reasoning_surfaces import ask, prepare

__all__ = ["formatted"]
MODEL = "scripted-1"


def split(blocks: list[Any]) -> tuple[str, str, list[str]]:
    """The thinking, the text and the kinds of the blocks, in order."""
    thinking = "".join(b.thinking for b in blocks if b.type == "thinking")
    return thinking, "".join(b.text for b in blocks if b.type == "text"), [
        b.type for b in blocks]


def kinds(case: dict[str, Any]) -> list[str]:
    """A thinking block when there is reasoning; a text block when there is text, or when
    it would be the only block."""
    thinking = ["thinking"] if case["reasoning"] else []
    return thinking + (["text"] if case["text"] or not thinking else [])


async def test_every_reasoning_case_is_a_thinking_block_streamed_and_whole(
    formatted: tuple[str, InProcessGateway], model_server: ModelServer
) -> None:
    fmt, gateway = formatted
    client = anthropic.AsyncAnthropic(base_url=gateway.url, max_retries=0,
                                      api_key=await gateway.api_key(f"anthropic-{fmt}"))
    async with client:
        for case in cases_of(fmt):
            key = prepare(model_server, case, f"anthropic-{fmt}")
            events = [e async for e in await client.messages.create(
                model=MODEL, max_tokens=256, messages=ask(key), stream=True)]
            deltas = [e.delta for e in events if e.type == "content_block_delta"]
            thought = "".join(d.thinking for d in deltas if d.type == "thinking_delta")
            text = "".join(d.text for d in deltas if d.type == "text_delta")
            starts = [e.content_block.type for e in events if e.type == "content_block_start"]
            assert (thought, text) == (case["reasoning"], case["text"]), case["id"]
            assert starts == kinds(case), case["id"]

            whole = await client.messages.create(model=MODEL, max_tokens=256,
                                                 messages=ask(key))
            assert split(whole.content) == (case["reasoning"], case["text"],
                                            kinds(case)), case["id"]

            async with client.messages.stream(model=MODEL, max_tokens=256,
                                              messages=ask(key)) as stream:
                final = await stream.get_final_message()
            assert split(final.content)[:2] == (case["reasoning"], case["text"]), case["id"]
