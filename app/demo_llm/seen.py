"""What the demo server saw: recent request bodies and stream outcome counters (for tests)."""

from __future__ import annotations

import datetime
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

StreamOutcome = Literal["completed", "cancelled", "aborted"]


@dataclass
class RecordedRequest:
    """One chat completion request as received."""

    received_at: str
    scenario: str
    stream: bool
    body: dict[str, Any]


@dataclass
class Recorder:
    """In-memory, per app instance; single event loop, so no locking is needed."""

    limit: int = 200
    requests: deque[RecordedRequest] = field(default_factory=deque)
    total_requests: int = 0
    streams_started: int = 0
    active_streams: int = 0
    outcomes: dict[str, int] = field(
        default_factory=lambda: {"completed": 0, "cancelled": 0, "aborted": 0}
    )

    def record(self, body: dict[str, Any], scenario: str, stream: bool) -> None:
        """Keep the request body (oldest dropped beyond the limit)."""
        now = datetime.datetime.now(datetime.UTC).isoformat()
        self.requests.append(RecordedRequest(now, scenario, stream, body))
        while len(self.requests) > self.limit:
            self.requests.popleft()
        self.total_requests += 1

    def stream_started(self) -> None:
        """A streamed response began."""
        self.streams_started += 1
        self.active_streams += 1

    def stream_ended(self, outcome: StreamOutcome) -> None:
        """A streamed response ended: ran to [DONE], was cancelled by the client, or aborted."""
        self.active_streams -= 1
        self.outcomes[outcome] += 1

    def reset(self) -> None:
        """Forget everything (active streams keep counting down correctly)."""
        self.requests.clear()
        self.total_requests = 0
        self.streams_started = self.active_streams
        self.outcomes = {"completed": 0, "cancelled": 0, "aborted": 0}

    def stats(self) -> dict[str, int]:
        """Counters for `GET /v1/_debug/stats`."""
        return {
            "requests": self.total_requests,
            "streams_started": self.streams_started,
            "active_streams": self.active_streams,
            "streams_completed": self.outcomes["completed"],
            "streams_cancelled": self.outcomes["cancelled"],
            "streams_aborted": self.outcomes["aborted"],
        }

    def recent(self, limit: int) -> list[dict[str, Any]]:
        """The last `limit` requests, oldest first."""
        items = list(self.requests)[-limit:] if limit > 0 else []
        return [
            {"received_at": r.received_at, "scenario": r.scenario, "stream": r.stream,
             "body": r.body}
            for r in items
        ]
