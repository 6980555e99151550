"""Keep-alive pings: while the model thinks before its first token, the gateway sends SSE
comment lines every `keepalive_s`, so proxies and browsers do not drop a silent connection;
the answer that follows is unaffected."""

from __future__ import annotations

import re

from tests.e2e.helpers import messages, new_thread
from tests.support.gateway import DemoLlm, StartGateway, parse_sse

KEEPALIVE_S = 0.3
#: sse-starlette's default ping: a comment line `: ping - <UTC time>`.
PING_LINE = re.compile(r"^: ?ping\b.*$", re.MULTILINE)


async def test_pings_fill_the_silence_before_a_slow_first_token(
    live_backend: str, demo_llm: DemoLlm, start_gateway: StartGateway
) -> None:
    # demo_llm holds `[slow-first]`'s first token back 1.5 s; no title call (it would be slow
    # too)
    gateway = start_gateway(live_backend, upstream=demo_llm, env={
        "CHATGATE_KEEPALIVE_S": str(KEEPALIVE_S),
        "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "10",
        "CHATGATE_TITLE_CALLS": "false",
    })
    async with gateway.client(await gateway.api_key("patient")) as client:
        thread_id = await new_thread(client)
        async with client.stream("POST", f"/api/threads/{thread_id}/messages",
                                 json={"content": "Think first [slow-first]"}) as response:
            assert response.status_code == 200
            raw = b"".join([piece async for piece in response.aiter_raw()]).decode("utf-8")
        stored = await messages(client, thread_id)

    first_delta = raw.index("event: delta")
    pings_before = PING_LINE.findall(raw[:first_delta])
    assert len(pings_before) >= 2, f"no keep-alive during the 1.5 s silence: {raw[:first_delta]!r}"

    events = parse_sse(raw)
    assert [e.event for e in events][-2:] == ["usage", "message_end"]
    assert events[-1].data["status"] == "complete"
    text = "".join(e.data["text"] for e in events if e.event == "delta")
    assert "Think first" in text and "<!--" not in text and "ping" not in text
    assert stored[-1]["role"] == "assistant"
    assert (stored[-1]["status"], stored[-1]["content"]) == ("complete", text)
