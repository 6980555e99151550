"""Every public reasoning case on a gateway configured for its format
(CHATGATE_REASONING_FORMAT): the native SSE stream and the stored row (the messages API's
`reasoning`), and, for the formats other than the default, /v1 with the openai SDK,
streamed and not (the default's are in test_reasoning_surfaces.py); and the Responses API
with the openai SDK for every format's cases: the reasoning as a `reasoning` item ahead of the
message, streamed, through `responses.stream`, whole, and read back by id."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import messages as thread_messages
from tests.e2e.helpers import new_thread
from tests.stream.test_reasoning_conformance import CASES
from tests.support.gateway import GatewayPool, InProcessGateway
from tests.support.gateway.sse import post_turn
from tests.support.http import sdk
from tests.turn.openai.model_server import ModelServer
from tests.turn.openai.test_reasoning_surfaces import ask, prepare
from tests.turn.openai.test_responses_sdk import chatgate

MODEL = "scripted-1"
FORMATS = ["think", "think-prefilled", "none"]


@pytest.fixture(scope="module", params=FORMATS)
def formatted(request: pytest.FixtureRequest, live_backend: str, model_server: ModelServer,
              live_log_dir: Path) -> Iterator[tuple[str, InProcessGateway]]:
    fmt: str = request.param
    with GatewayPool(live_log_dir) as pool:
        yield fmt, pool.start(live_backend, upstream=model_server.base_url, env={
            "CHATGATE_TITLE_CALLS": "false", "CHATGATE_SUMMARY_CALLS": "false",
            "CHATGATE_RATE_LIMIT_PER_MINUTE": "0", "CHATGATE_UPSTREAM_MODEL": MODEL,
            "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "10", "CHATGATE_REASONING_FORMAT": fmt,
        })


def cases_of(fmt: str) -> list[dict[str, Any]]:
    return [c for c in CASES if c.get("reasoning_format", "think") == fmt]


async def test_native_stream_and_stored_row_of_each_formats_cases(
    formatted: tuple[str, InProcessGateway], model_server: ModelServer
) -> None:
    fmt, gateway = formatted
    assert cases_of(fmt)
    async with gateway.client(await gateway.api_key(f"native-{fmt}")) as client:
        thread_id = await new_thread(client)
        for case in cases_of(fmt):
            key = prepare(model_server, case, f"native-{fmt}")
            result = await post_turn(client, thread_id, ask(key)[0]["content"])
            thoughts = "".join(e.data["text"] for e in result.of("reasoning"))
            assert (thoughts, result.text) == (case["reasoning"], case["text"]), case["id"]
            stored = (await thread_messages(client, thread_id))[-1]
            assert stored["content"] == case["text"], case["id"]
            assert stored["reasoning"] == (case["reasoning"] or None), case["id"]
            assert stored["metadata"]["stream"]["warnings"] == case["warnings"], case["id"]


@pytest.mark.parametrize("formatted", [f for f in FORMATS if f != "think"], indirect=True,
                         scope="module")  # the default format's: test_reasoning_surfaces.py
async def test_openai_sdk_of_each_formats_cases(
    formatted: tuple[str, InProcessGateway], model_server: ModelServer
) -> None:
    fmt, gateway = formatted
    client = sdk(gateway.url + "/v1", await gateway.api_key(f"sdk-{fmt}"))
    async with client:
        for case in cases_of(fmt):
            key = prepare(model_server, case, f"sdk-{fmt}")
            stream = await client.chat.completions.create(
                model=MODEL, messages=ask(key), stream=True)  # type: ignore[arg-type]
            deltas = [c.choices[0].delta async for c in stream if c.choices]
            thought = "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
            text = "".join(d.content or "" for d in deltas)
            assert (thought, text) == (case["reasoning"], case["text"]), case["id"]
            whole = await client.chat.completions.create(
                model=MODEL, messages=ask(key))  # type: ignore[arg-type]
            message = whole.choices[0].message
            assert message.content == case["text"], case["id"]
            assert (message.model_extra or {}).get("reasoning_content") == (
                case["reasoning"] or None), case["id"]


def summary_of(response: Any) -> tuple[list[str], str]:
    """A response's output item types and its reasoning item's summary text ("" without)."""
    kinds = [item.type for item in response.output]
    thought = "".join(part.text for item in response.output if item.type == "reasoning"
                      for part in item.summary)
    return kinds, thought


def expected_items(case: dict[str, Any]) -> list[str]:
    return ["reasoning", "message"] if case["reasoning"] else ["message"]


async def test_responses_api_shows_each_formats_reasoning_as_a_reasoning_item(
    formatted: tuple[str, InProcessGateway], model_server: ModelServer
) -> None:
    fmt, gateway = formatted
    client = sdk(gateway.url + "/v1", await gateway.api_key(f"responses-{fmt}"))
    async with client:
        for case in cases_of(fmt):
            want = (case["reasoning"], case["text"])
            key = prepare(model_server, case, f"responses-{fmt}")
            events = [e async for e in await client.responses.create(
                model=MODEL, input=ask(key)[0]["content"], stream=True)]
            assert [e.sequence_number for e in events] == list(range(len(events)))
            kinds = [e.type for e in events]
            thought = "".join(e.delta for e in events
                              if e.type == "response.reasoning_summary_text.delta")
            text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
            assert (thought, text) == want, case["id"]
            done = events[-1]
            assert done.type == "response.completed", case["id"]
            assert summary_of(done.response) == (expected_items(case), case["reasoning"])
            assert done.response.output_text == case["text"], case["id"]
            assert chatgate(done.response)["warnings"] == case["warnings"], case["id"]
            if case["reasoning"]:
                assert kinds.index("response.reasoning_summary_part.done") < kinds.index(
                    "response.content_part.added"), case["id"]  # thinking, then the answer
                assert {e.output_index for e in events if e.type.startswith(
                    "response.reasoning")} == {0}
                assert {e.output_index for e in events if e.type.startswith(
                    "response.output_text")} == {1}
                [text_done] = [e for e in events
                               if e.type == "response.reasoning_summary_text.done"]
                assert text_done.text == case["reasoning"]
            else:
                assert not any(k.startswith("response.reasoning") for k in kinds), case["id"]

            stored = await client.responses.retrieve(done.response.id)
            assert summary_of(stored) == (expected_items(case), case["reasoning"]), case["id"]
            assert stored.output_text == case["text"], case["id"]

            shown: list[str] = []
            async with client.responses.stream(model=MODEL, input=ask(key)[0]["content"],
                                               store=False) as stream:
                async for event in stream:
                    if event.type == "response.reasoning_summary_text.delta":
                        shown.append(event.delta)
                final = await stream.get_final_response()
            assert ("".join(shown), final.output_text) == want, case["id"]
            assert summary_of(final) == (expected_items(case), case["reasoning"]), case["id"]

            whole = await client.responses.create(model=MODEL, input=ask(key)[0]["content"],
                                                  store=False)
            assert (summary_of(whole)[1], whole.output_text) == want, case["id"]
            assert summary_of(whole)[0] == expected_items(case), case["id"]
