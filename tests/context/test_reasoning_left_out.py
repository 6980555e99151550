"""A model's reasoning is never sent back to it: an OpenAI client that echoes a reasoning
model's answers (`reasoning_content`, `reasoning`) has them folded into MSG_CONTEXT as their
text only, and a tool round in progress passed without them."""

from __future__ import annotations

import json

from app.context.client_history import upstream_messages


def test_an_echoed_answers_reasoning_reaches_the_model_nowhere() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    sent = upstream_messages([
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1", "reasoning_content": "THOUGHT-1"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "checking", "tool_calls": [call],
         "reasoning_content": "THOUGHT-2", "reasoning": "THOUGHT-3"},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ], system_prompt="S", budget_chars=10_000)
    text = json.dumps(sent)
    assert "THOUGHT" not in text
    assert sent[-2] == {"role": "assistant", "content": "checking", "tool_calls": [call]}
    assert '"a1"' in sent[1]["content"]  # the answer's text is in the history
