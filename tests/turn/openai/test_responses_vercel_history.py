"""The Vercel AI SDK's default provider (the pinned `ai` 6 and `@ai-sdk/openai` 3 on node 20)
the way a chat app uses it: a `useChat`-style history of three turns whose earlier answers go
back as `item_reference`s to the stored messages and reasoning (`store` is on by default):
every turn of every public marker case gets exactly the spec's clean text, a thinking model's
turns their thinking apart, and a tool round then a next user turn work. Without node the test
is skipped, loudly; under CI it fails instead."""

from __future__ import annotations

import json
import os
import re
import subprocess
from typing import Any

import pytest

from tests.support.gateway import InProcessGateway
from tests.turn.native.test_reasoning_demo import demo_llm
from tests.turn.openai.cases import CASES, prepare
from tests.turn.openai.model_server import ModelServer, answer_body
from tests.turn.openai.test_node_client import RUN_TIMEOUT_S, installed_clients, node_and_npm
from tests.turn.openai.test_sdk import tool_call_body

#: A thinking model: the demo model's reasoning scenarios for the default reasoning format,
#: inline, in the delta field, and with a draft METADATA inside the thinking.
THINKING_PROMPTS = ["[think]", "[think-field]", "[think-markers]"]
__all__ = ["demo_llm"]  # the demo model of `gateway`, thinking without a pause


async def history_lines(gateway: InProcessGateway, user: str, model: str,
                        **env: str) -> list[dict[str, Any]]:
    node, npm = node_and_npm()
    folder = installed_clients(npm)
    result = subprocess.run(
        [node, "vercel_history.mjs"], cwd=folder, text=True, capture_output=True,
        timeout=RUN_TIMEOUT_S, check=False,
        env={**os.environ, "CHATGATE_BASE_URL": gateway.url + "/v1",
             "CHATGATE_API_KEY": await gateway.api_key(user), "CHATGATE_MODEL": model, **env})
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


async def test_three_turns_of_every_case_are_clean_with_references_sent_back(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    keys = {prepare(model_server, case, "vercel-history"): case for case in CASES}
    lines = await history_lines(oa_gateway, "vercel-history", "scripted-1",
                                CHATGATE_MODE="cases", CHATGATE_CASE_KEYS=json.dumps(list(keys)))
    assert sorted(line["key"] for line in lines) == sorted(keys)
    for line in lines:
        case = keys[line["key"]]
        assert [t["text"] for t in line["turns"]] == [case["text"]] * 3, case["id"]
        second, third = line["turns"][1]["sent"], line["turns"][2]["sent"]
        assert second == ["user", "msg", "user"], case["id"]
        assert third == ["user", "msg", "user", "msg", "user"], case["id"]
    # the model was shown the earlier answers' clean text, not the raw answer
    key, case = next((k, c) for k, c in keys.items() if c["text"] != c["input"]
                     and re.fullmatch(r"[\w .,!?']+", c["text"]))
    *_, last = model_server.requests_for(key)
    shown = json.dumps(last["messages"][1:])  # the system prompt names METADATA itself
    assert shown.count(case["text"]) == 2 and "METADATA: {" not in shown, case["id"]


@pytest.fixture(scope="module")
def live_backend() -> str:
    """One database is enough: what a client sees on the wire does not depend on it
    (test_item_references runs the references on both)."""
    return "sqlite"


async def test_a_thinking_models_history_sends_its_reasoning_by_reference(
    gateway: InProcessGateway
) -> None:
    lines = await history_lines(gateway, "vercel-thinking", "demo-1", CHATGATE_MODE="prompts",
                                CHATGATE_PROMPTS=json.dumps(THINKING_PROMPTS))
    assert [line["key"] for line in lines] == THINKING_PROMPTS
    for line in lines:
        for turn in line["turns"]:
            assert turn["text"] and turn["reasoning"], (line["key"], turn["turn"])
            for raw in ("<think>", "</think>", "<!--"):
                assert raw not in turn["text"] + turn["reasoning"], (line["key"], turn)
        assert line["turns"][1]["sent"] == ["user", "rs", "msg", "user"], line["key"]
        assert line["turns"][2]["sent"] == ["user", "rs", "msg", "user", "rs", "msg", "user"]


async def test_a_tool_round_then_the_next_user_turn(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    key = "vercel-history-tool"
    model_server.bodies[key] = tool_call_body()
    model_server.bodies[f"{key}.after-tool"] = answer_body(["It is sunny in Brno."])
    model_server.bodies[f"{key}-next"] = answer_body(["Sunny again tomorrow."])
    model_server.bodies[f"{key}-next.after-tool"] = answer_body(["Sunny again tomorrow."])
    [line] = await history_lines(oa_gateway, "vercel-history-tool", "scripted-1",
                                 CHATGATE_MODE="tool", CHATGATE_TOOL_KEY=key)
    first, second = line["turns"]
    assert (first["text"], first["steps"]) == ("It is sunny in Brno.", 2)
    assert second["text"] == "Sunny again tomorrow."
    assert second["sent"] == ["user", "function_call", "function_call_output", "msg", "user"]
    shown = json.dumps(model_server.requests_for(f"{key}-next")[-1]["messages"])
    assert "It is sunny in Brno." in shown and "sunny" in shown
