"""The provider's reasoning tokens through /v1: a thinking model's call behind the Responses
API reports them in `usage.output_tokens_details` (from its call record), and they are in the
caller's usage; a plain answer's are 0. The demo model behind the real openai SDK."""

from __future__ import annotations

import openai

from app.demo_llm.scenarios import chat_input, count_tokens, plan_reply
from tests.support.gateway import DemoLlm, InProcessGateway


async def test_a_thinking_answer_reports_its_reasoning_tokens(
        gateway: InProcessGateway, demo_llm: DemoLlm) -> None:
    question = "Tell me about tides [think]"
    async with openai.AsyncOpenAI(base_url=gateway.url + "/v1", max_retries=0,
                                  api_key=await gateway.api_key("v1-thinker")) as client:
        thought = await client.responses.create(model="demo-1", input=question, store=False)
        plain = await client.responses.create(model="demo-1", input="Tell me about tides",
                                              store=False)
    sent = next(r["body"] for r in reversed(demo_llm.requests(50))
                if question in str(r["body"]["messages"][-1]["content"]))
    reply = plan_reply(chat_input(sent["messages"]))
    expected = count_tokens(reply.thinking_sent(len(reply.pieces)))
    assert thought.usage is not None and plain.usage is not None
    assert thought.usage.output_tokens_details.reasoning_tokens == expected > 0
    assert plain.usage.output_tokens_details.reasoning_tokens == 0
