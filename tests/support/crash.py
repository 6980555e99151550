"""Helpers for crash tests: read a live turn while timing each delta, and the settings that
make a gateway detect a dead peer quickly."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import httpx

from tests.support.gateway import iter_sse

#: A dead process noticed soon: a beat every 0.25 s, dead 3.5 s after its last one. A live
#: process fences its own answers once its lease runs out unrenewed, and a loaded machine
#: (each beat also sweeps) must not stall it that long: the fence is 3 s, not the derived
#: half of dead-after, and the takeover follows it by the least margin the settings allow
#: (app.config.fencing), which is all a crash test waits for after the kill.
FAST_DETECTION_ENV = {
    "CHATGATE_HEARTBEAT_S": "0.25",
    "CHATGATE_PROCESS_FENCE_AFTER_S": "3.0",
    "CHATGATE_PROCESS_DEAD_AFTER_S": "3.5",
}
#: Heartbeat, dead-after and checkpoint settings short enough for a test to wait on.
#: `CG_CRASH_DEFAULT_SETTINGS=1` keeps the production defaults instead (2 s, 10 s, 1 s), to
#: measure the figures docs/production.md gives.
FAST_RECOVERY_ENV = {
    **FAST_DETECTION_ENV,
    "CHATGATE_CHECKPOINT_INTERVAL_S": "1.0",
    "CHATGATE_TITLE_CALLS": "false",
    "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "10",  # a loaded machine must not fail the turn first
}
DEFAULT_RECOVERY_ENV = {"CHATGATE_TITLE_CALLS": "false", "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "10"}
DEFAULTS = {"CHATGATE_HEARTBEAT_S": 2.0, "CHATGATE_PROCESS_DEAD_AFTER_S": 10.0,
            "CHATGATE_CHECKPOINT_INTERVAL_S": 1.0}


def recovery_env() -> dict[str, str]:
    if os.environ.get("CG_CRASH_DEFAULT_SETTINGS") == "1":
        return dict(DEFAULT_RECOVERY_ENV)
    return dict(FAST_RECOVERY_ENV)


def recovery_setting(env: dict[str, str], name: str) -> float:
    return float(env.get(name, DEFAULTS[name]))


@dataclass
class SeenDeltas:
    """What a client saw of a turn: each delta's text with its monotonic arrival time."""

    pieces: list[tuple[float, str]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.pieces)

    def text_before(self, moment: float) -> str:
        """The text the client had seen at `moment` (monotonic)."""
        return "".join(text for at, text in self.pieces if at <= moment)


async def read_deltas(client: httpx.AsyncClient, thread_id: str, content: str,
                      count: int) -> SeenDeltas:
    """Post a turn and read `count` deltas, then return with the response still open (the
    caller kills the gateway next; the with-block then closes the dead connection)."""
    seen = SeenDeltas()
    async with client.stream("POST", f"/api/threads/{thread_id}/messages",
                             json={"content": content}) as response:
        assert response.status_code == 200
        others = []  # what ended the turn, for the message
        async for event in iter_sse(response):
            if event.event == "delta":
                seen.pieces.append((time.monotonic(), event.data["text"]))
                if len(seen.pieces) >= count:
                    return seen
            elif event.event not in ("reasoning", "ping"):
                others.append((event.event, event.data))
    raise AssertionError(f"the turn ended after {len(seen.pieces)} deltas: {others}")
