"""One short non-streamed upstream call of a turn besides the main answer (title, summary).

It never fails the turn: a failed call is logged as a warning and recorded (status `failed`,
estimated usage flagged `partial`), and the caller goes on without its answer. Whatever
happens, the call is one record in the turn's recorder, so it is one `llm_calls` row and one
entry of `metadata.processingDetails.llm_calls`, and its tokens are in `metadata.tokens`."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.clock import utcnow
from app.logging import get_logger
from app.services.turn_usage import side_call_record
from app.turns.records import CallRecord
from app.turns.records import FinalStatus as CallStatus
from app.upstream import Completion, UpstreamError

if TYPE_CHECKING:
    from app.services.turn import Turn

log = get_logger("services.side_call")


@dataclass(frozen=True)
class SideCall:
    """What to ask: the stage name (also the pipeline_stages key), a human description,
    the chat messages and the completion token limit."""

    stage: str
    description: str
    messages: Sequence[dict[str, str]]
    max_tokens: int


@dataclass(frozen=True)
class SideCallOutcome:
    """The answer's text (None when the call failed) and the call's record."""

    text: str | None
    record: CallRecord


async def run_side_call(turn: Turn, call: SideCall) -> SideCallOutcome:
    """Make the call, time it as its own pipeline stage and record it in the turn. A client
    leaving meanwhile (cancellation) records the call as `interrupted` and propagates."""
    started = utcnow()
    timeout_s = turn.deps.settings.side_call_timeout_s
    with turn.recorder.stage(call.stage):
        try:
            completion = await turn.deps.upstream.complete(
                call.messages, max_tokens=call.max_tokens, timeout_s=timeout_s
            )
        except asyncio.CancelledError:
            _add(turn, call, started, None, "interrupted", error="cancelled: the turn ended")
            raise
        except UpstreamError as exc:
            log.warning(f"{call.stage}_call_failed", code=exc.code, error=exc.message)
            record = _add(turn, call, started, None, "failed", failure_code=exc.code,
                          error=f"{exc.code}: {exc.message}")
            return SideCallOutcome(None, record)
        except Exception as exc:
            log.exception(f"{call.stage}_call_failed", code="internal_error",
                          error=type(exc).__name__)
            record = _add(turn, call, started, None, "failed",
                          error=f"internal_error: {type(exc).__name__}")
            return SideCallOutcome(None, record)
    record = _add(turn, call, started, completion, "complete")
    return SideCallOutcome(completion.text, record)


def _add(
    turn: Turn,
    call: SideCall,
    started: datetime.datetime,
    completion: Completion | None,
    status: CallStatus,
    *,
    failure_code: str | None = None,
    error: str | None = None,
) -> CallRecord:
    record = side_call_record(
        turn, stage=call.stage, description=call.description, max_tokens=call.max_tokens,
        messages=call.messages, started_at=started, completion=completion, status=status,
        failure_code=failure_code, error=error,
    )
    turn.recorder.add_call(record)
    return record
