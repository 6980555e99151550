"""One short non-streamed upstream call of a turn besides the main answer (title, summary).

It never fails the turn: a failed call is logged as a warning and recorded (status `failed`,
estimated usage flagged `partial`), and the caller goes on without its answer. Whatever
happens, the call is one record in the turn's draft, so it is one `llm_calls` row and one
entry of `metadata.processingDetails.llm_calls`, and its tokens are in `metadata.tokens`."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.answer.call_usage import CallContext, side_call_record
from app.answer.inputs import Completion
from app.answer.pricing import PriceTable
from app.answer.records import CallRecord, FinalStatus
from app.core.clock import utcnow
from app.observe.logging import get_logger
from app.turn.observers.seam import ContextDraft
from app.upstream import UpstreamClient, UpstreamError

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


@dataclass(frozen=True)
class SideCaller:
    """Makes side calls for the stages that need them (one per process)."""

    upstream: UpstreamClient
    prices: PriceTable
    timeout_s: float

    async def value(self, draft: ContextDraft, call: SideCall,
                    clean: Callable[[str], str | None]) -> tuple[str, CallRecord] | None:
        """The call's answer made a stage's value by `clean`, with the call's record; None
        when the call failed or `clean` left nothing (logged: `<stage>_empty`)."""
        outcome = await self.run(draft, call)
        if outcome.text is None:
            return None
        value = clean(outcome.text)
        if value is None:
            log.warning(f"{call.stage}_empty", answer_chars=len(outcome.text))
            return None
        return value, outcome.record

    async def run(self, draft: ContextDraft, call: SideCall) -> SideCallOutcome:
        """Make the call, time it as its own pipeline stage and record it in the draft. A
        client leaving meanwhile (cancellation) records the call `interrupted` and
        propagates."""
        started = utcnow()
        with draft.stage(call.stage):
            try:
                completion = await self.upstream.complete(
                    call.messages, max_tokens=call.max_tokens, timeout_s=self.timeout_s)
            except asyncio.CancelledError:
                self._add(draft, call, started, None, "interrupted",
                          error="cancelled: the turn ended")
                raise
            except UpstreamError as exc:
                log.warning(f"{call.stage}_call_failed", code=exc.code, error=exc.message)
                record = self._add(draft, call, started, None, "failed", failure_code=exc.code,
                                   error=f"{exc.code}: {exc.message}")
                return SideCallOutcome(None, record)
            except Exception as exc:
                log.exception(f"{call.stage}_call_failed", code="internal_error",
                              error=type(exc).__name__)
                record = self._add(draft, call, started, None, "failed",
                                   error=f"internal_error: {type(exc).__name__}")
                return SideCallOutcome(None, record)
        record = self._add(draft, call, started, completion, "complete")
        return SideCallOutcome(completion.text, record)

    def _add(
        self, draft: ContextDraft, call: SideCall, started: dt.datetime,
        completion: Completion | None, status: FinalStatus, *,
        failure_code: str | None = None, error: str | None = None,
    ) -> CallRecord:
        ctx = CallContext(self.upstream.model,
                          self.upstream.request_params(max_tokens=call.max_tokens), self.prices)
        record = side_call_record(
            ctx, stage=call.stage, description=call.description, messages=call.messages,
            started_at=started, finished_at=utcnow(), completion=completion, status=status,
            failure_code=failure_code, error=error)
        draft.add_call(record)
        return record
