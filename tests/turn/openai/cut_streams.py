"""A /v1 stream cut by the gateway while it runs (its key revoked, its process fenced), read
through the openai SDK as a client reads it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import openai
import pytest

from tests.support.gateway import InProcessGateway
from tests.support.http import sdk

LONG = [{"role": "user", "content": "[long] tell me everything"}]
#: What a cut must take at most: the whole [long] answer at the slow demo model's 10 ms a
#: delta takes some 9 s.
CUT_WITHIN_S = 5.0


async def cut_mid_stream(gateway: InProcessGateway, key: str,
                         cut: Callable[[], Awaitable[None]]) -> tuple[str, openai.APIError]:
    """The text the client saw of a [long] streamed answer, `cut` once its first text came,
    and the error the SDK raised from the stream (within CUT_WITHIN_S)."""
    seen, done = "", False
    async with sdk(gateway.url + "/v1", key) as client:
        stream = await client.chat.completions.create(model="demo-1", messages=LONG,
                                                      stream=True)
        with pytest.raises(openai.APIError) as caught:
            async with asyncio.timeout(CUT_WITHIN_S):
                async for chunk in stream:
                    seen += (chunk.choices[0].delta.content or "") if chunk.choices else ""
                    if seen and not done:
                        await cut()
                        done = True
    return seen, caught.value
