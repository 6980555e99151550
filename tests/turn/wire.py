"""Turn events as a native SSE client reads them (event name, JSON data, id): the service
tests assert on what a client would see, through the one encoder the endpoint uses."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.answer.events import TurnEvent
from app.turn.native.frames import encode


@dataclass(frozen=True)
class WireEvent:
    event: str
    data: dict[str, Any]
    id: str | None


def on_the_wire(event: TurnEvent) -> WireEvent:
    fields: dict[str, str] = {}
    for line in encode(event).decode().removesuffix("\n\n").split("\n"):
        name, _, value = line.partition(": ")
        assert name not in fields, f"one {name} line per event: {line!r}"
        fields[name] = value
    return WireEvent(fields["event"], json.loads(fields["data"]), fields.get("id"))
