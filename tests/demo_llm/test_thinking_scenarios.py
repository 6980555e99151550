"""The thinking scenarios ([think], [think-prefilled], [think-field], [think-unclosed],
[think-markers]): the exact output docs/demo_scenarios.md promises, and what the reasoning
spec (markers.md, "Reasoning") makes of it: the reasoning, the visible text, the metadata and
the warnings. The split here is the spec's rule for a leading block, written out for these
outputs (each is well-formed or plainly unclosed); the gateway's own split is the stream
filter's, tested against the conformance cases."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytest

from app.demo_llm.scenarios import (
    DRAFT_METADATA,
    MODIFIERS,
    SHAPES,
    ChatInput,
    Reply,
    answer_text,
    metadata_comment,
    plan_completion,
    plan_reply,
    thinking_text,
)
from app.stream import MarkerFilter

META = {"language": "en", "sources": [], "awaiting": None}
Format = Literal["think", "think-prefilled", "none"]


def chat(text: str) -> ChatInput:
    return ChatInput(system="", user_text=text, context_block=None)


def through_filter(text: str) -> tuple[str, Any, list[str]]:
    marker_filter = MarkerFilter()
    visible = marker_filter.feed(text) + marker_filter.close()
    return visible, marker_filter.metadata, marker_filter.warnings


def split(reply: Reply, fmt: Format = "think") -> tuple[str, str, Any, list[str]]:
    """(reasoning, visible, metadata, warnings) as the spec's rules make them."""
    content, inline, warnings = reply.text, "", []
    start = len(content) - len(content.lstrip(" \t\r\n"))
    if fmt != "none":
        opened = content.startswith("<think>", start)
        begins = (start + len("<think>") if opened
                  else 0 if fmt == "think-prefilled" else None)
        if begins is not None:
            end = content.find("</think>", begins)
            if end < 0:
                inline, content = content[begins:], ""
                warnings.append("reasoning_unclosed")
            else:
                inline, content = content[begins:end], content[end + len("</think>"):]
    thought, _, _ = through_filter(reply.reasoning + inline)
    if "<!--" in reply.reasoning + inline:
        warnings.insert(0, "markers_in_reasoning")
    visible, metadata, content_warnings = through_filter(content)
    return thought.strip(), visible, metadata, warnings + content_warnings


def test_think_opens_with_a_leading_block_then_answers() -> None:
    reply = plan_reply(chat("[think] Hi"))
    thinking, answer = thinking_text(chat("[think] Hi")), answer_text(chat("[think] Hi"), None)
    assert reply.scenario == "think"
    assert reply.text == (f"<think>\n{thinking}\n</think>\n\n{answer}\n\n"
                          f"{metadata_comment(META)}")
    assert split(reply) == (thinking, answer, META, [])
    assert "".join(reply.pieces[:reply.thinking_pieces]).endswith("</think>\n\n")


def test_thinking_is_markdown_quoting_the_topic() -> None:
    assert thinking_text(chat("[think] How do tides work?")).startswith(
        "The user asks about **How do tides work?**. I am the demo model, so my plan is:\n- ")


def test_think_prefilled_has_no_opener_and_needs_its_format() -> None:
    reply = plan_reply(chat("[think-prefilled] Hi"))
    thinking = thinking_text(chat("[think-prefilled] Hi"))
    answer = answer_text(chat("[think-prefilled] Hi"), None)
    assert reply.text.startswith(thinking + "\n</think>\n\n")
    assert split(reply, "think-prefilled") == (thinking, answer, META, [])
    # with the default format the model's thinking is plain text, closer and all
    assert split(reply, "think")[:2] == ("", f"{thinking}\n</think>\n\n{answer}")


def test_think_field_streams_the_thinking_in_the_reasoning_field() -> None:
    reply = plan_reply(chat("[think-field] Hi"))
    thinking, answer = thinking_text(chat("[think-field] Hi")), answer_text(
        chat("[think-field] Hi"), None)
    assert reply.reasoning == thinking and reply.thinking_pieces == 0
    assert reply.text == f"{answer}\n\n{metadata_comment(META)}"
    assert split(reply) == split(reply, "none") == (thinking, answer, META, [])


def test_think_unclosed_thinks_to_the_end() -> None:
    reply = plan_reply(chat("[think-unclosed] Hi"))
    thinking = thinking_text(chat("[think-unclosed] Hi"))
    assert reply.text == f"<think>\n{thinking}"
    assert reply.thinking_pieces == len(reply.pieces)
    assert split(reply) == (thinking, "", None, ["reasoning_unclosed"])


def test_think_markers_drafts_a_metadata_block_inside_the_thinking() -> None:
    reply = plan_reply(chat("[think-markers] Hi"))
    thinking = thinking_text(chat("[think-markers] Hi"))
    answer = answer_text(chat("[think-markers] Hi"), None)
    assert reply.text.startswith(
        f"<think>\nDraft: {metadata_comment(DRAFT_METADATA)} no, the answer is in English.\n")
    reasoning = f"Draft:  no, the answer is in English.\n{thinking}"
    assert split(reply) == (reasoning, answer, META, ["markers_in_reasoning"])


@pytest.mark.parametrize("keyword", ["[think]", "[think-field]", "[think-markers]"])
def test_thinking_pieces_are_token_sized_and_the_same_each_time(keyword: str) -> None:
    first, again = plan_reply(chat(f"{keyword} Hi")), plan_reply(chat(f"{keyword} Hi"))
    assert first == again
    assert all(1 <= len(piece) <= 6 for piece in (*first.reasoning_pieces, *first.pieces))
    assert len(first.reasoning_pieces) + first.thinking_pieces > 20  # a moment of thinking


def test_a_plain_answer_does_not_think() -> None:
    reply = plan_reply(chat("Hi"))
    assert not reply.thinks and reply.thinking_sent(len(reply.pieces)) == ""


def test_a_non_streamed_thinking_answer_keeps_its_thinking_apart() -> None:
    inline = plan_completion(chat("[think] Hi"))
    assert inline.thinking_sent(len(inline.pieces)).startswith("<think>\n")
    field = plan_completion(chat("[think-field] Hi"))
    assert field.reasoning == thinking_text(chat("[think-field] Hi"))


def test_every_keyword_is_documented() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "demo_scenarios.md").read_text()
    missing = [k for k in (*SHAPES, *MODIFIERS) if f"`[{k}]`" not in doc]
    assert missing == []
