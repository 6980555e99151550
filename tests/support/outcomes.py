"""The TurnOutcome of a clean one-chunk answer, for tests that finish a turn by hand."""

from __future__ import annotations

import time

from app.answer.finish import TurnOutcome


def complete_outcome() -> TurnOutcome:
    started = time.monotonic()
    return TurnOutcome(
        status="complete", failure=None, finish_reason="stop", model="demo-1", text_chunks=1,
        raw_chunks=None, warnings=(), filter_closed=True, started=started, first_token=started,
        calls=())
