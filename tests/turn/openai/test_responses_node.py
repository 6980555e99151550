"""Node clients of the Responses API against /v1: openai-node's `responses.create` and the
Vercel AI SDK's default provider call (`createOpenAI({baseURL})(model)` with streamText and
generateText) get exactly the spec's clean text for every public conformance case cut at
random places, and the Vercel SDK runs a tool round trip. The packages (`ai` 6 and its OpenAI
provider 3, the last majors that run on node 20; the provider's default model speaks the
Responses API) are pinned by node/package-lock.json and installed as test_node_client says.
Without node the test is skipped, loudly; under CI it fails instead."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.gateway import InProcessGateway
from tests.turn.openai.cases import CASES, expected, prepare
from tests.turn.openai.model_server import ModelServer, answer_body
from tests.turn.openai.outside_clients import case_lines
from tests.turn.openai.test_node_client import (
    RUN_TIMEOUT_S,
    installed_clients,
    node_and_npm,
)
from tests.turn.openai.test_sdk import tool_call_body


@pytest.fixture(scope="module")
def live_backend() -> str:
    """One database is enough: what a client sees on the wire does not depend on it
    (test_responses_sdk runs the endpoint on both)."""
    return "sqlite"


async def _env(gateway: InProcessGateway, user: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "CHATGATE_BASE_URL": gateway.url + "/v1",
            "CHATGATE_API_KEY": await gateway.api_key(user), "CHATGATE_MODEL": "scripted-1",
            **extra}


def _run(node: str, script: str, folder: Path, env: dict[str, str]
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([node, script], cwd=folder, env=env, text=True, capture_output=True,
                          timeout=RUN_TIMEOUT_S, check=False)


async def test_openai_node_responses_get_every_case_clean(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    node, npm = node_and_npm()
    folder = installed_clients(npm)
    keys = {prepare(model_server, case, "node-responses"): case for case in CASES}
    env = await _env(oa_gateway, "node-responses", CHATGATE_CASE_KEYS=json.dumps(list(keys)))
    result = _run(node, "node_responses.mjs", folder, env)
    for case, line in case_lines(result, keys):
        text, metadata, warnings = expected(case)
        assert (line["streamed"], line["metadata"], line["warnings"]) == (
            text, metadata, warnings), case["id"]
        assert (line["whole"], line["completedText"], line["wholeMetadata"]) == (
            text, text, metadata), case["id"]
        assert (line["usage"]["total_tokens"],
                line["usage"]["output_tokens_details"]["reasoning_tokens"]) == (18, 0)


async def test_vercel_default_provider_gets_every_case_clean(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    node, npm = node_and_npm()
    folder = installed_clients(npm)
    keys = {prepare(model_server, case, "vercel"): case for case in CASES}
    env = await _env(oa_gateway, "vercel", CHATGATE_CASE_KEYS=json.dumps(list(keys)))
    result = _run(node, "vercel_responses.mjs", folder, env)
    for case, line in case_lines(result, keys):
        assert (line["streamed"], line["whole"], line["errors"]) == (
            case["text"], case["text"], []), case["id"]
        assert (line["finish"], line["inputTokens"], line["outputTokens"]) == ("stop", 11, 7)
        # a Responses id (chat completions' are chatcmpl-...): the default call went to
        # /v1/responses
        assert line["responseId"].startswith("resp_")


async def test_vercel_runs_a_tool_round_trip(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    node, npm = node_and_npm()
    folder = installed_clients(npm)
    key = "vercel-tool"
    model_server.bodies[key] = tool_call_body()
    model_server.bodies[f"{key}.after-tool"] = answer_body(
        ["It is sunny in Brno.", ' <!-- METADATA: {"language": "en"} -->'])
    result = _run(node, "vercel_responses.mjs", folder,
                  await _env(oa_gateway, "vercel-tools", CHATGATE_TOOL_KEY=key))
    assert result.returncode == 0, result.stderr
    [line] = [json.loads(x) for x in result.stdout.splitlines() if x.strip()]
    assert (line["text"], line["steps"], line["calls"]) == (
        "It is sunny in Brno.", 2, [["get_weather", {"city": "Brno"}]])
    first, second = model_server.requests_for(key)
    assert first["tools"][0]["function"]["name"] == "get_weather"
    assert second["messages"][-1]["role"] == "tool"
    assert json.loads(second["messages"][-1]["content"]) == {"city": "Brno", "sky": "sunny"}
