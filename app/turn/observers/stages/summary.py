"""The `summary` stage: when the history no longer fits `context_budget_chars`, the older
messages that do not fit are summarised into `threads.summary` by a non-streamed call before
the main call; MSG_CONTEXT then carries the summary plus the recent messages.

Incremental: the call gets the previous summary and only the messages dropped since it was
written. Which messages a summary covers is kept with its call in the assistant message's
metadata (`processingDetails.llm_calls[].details.covered_until`, the time of the newest
message it covers), written in the same transaction as `threads.summary`, so the two cannot
disagree. A failed call fails nothing: the turn goes on with the previous summary, and the
next turn tries again with everything dropped since."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.config.settings import Settings
from app.context import ContextItem
from app.context.builder import select_within_budget
from app.core.cleaning import clean_and_strip_markers
from app.observe.logging import get_logger
from app.store.db import Database
from app.store.models import Message
from app.threads import repository as thread_store
from app.turn.observers.seam import ContextDraft, TurnHandler, TurnView
from app.turn.observers.stages.side_call import SideCall, SideCaller
from app.turn.observers.stages.thread_field import ThreadFieldHandler
from app.turn.rows import messages as message_store

log = get_logger("services.summary")

SUMMARY_PROMPT = (
    "You keep the running summary of a conversation. Update the summary with the new "
    "messages below: keep names, facts, decisions and open questions, drop small talk, "
    "at most 150 words, plain text. Answer with the summary only."
)
#: Longest stored summary; it is sent with every later turn.
SUMMARY_MAX_CHARS = 4000
#: How much of one message the summary call sees.
MESSAGE_EXCERPT_CHARS = 2000
#: Messages searched for the newest summary's coverage (as many as a turn reads).
COVERAGE_LOOKBACK = 200


def dropped_items(history: Sequence[ContextItem], budget_chars: int) -> list[ContextItem]:
    """The oldest messages that MSG_CONTEXT leaves out (the builder's own budget rule)."""
    kept = select_within_budget(history, budget_chars)
    return list(history[: len(history) - len(kept)])


def summary_request(
    previous: str | None, new_items: Sequence[ContextItem]
) -> list[dict[str, str]]:
    """The messages of the summary call: the summary so far and the newly dropped turns."""
    lines = []
    for item in new_items:
        text = item.content
        if len(text) > MESSAGE_EXCERPT_CHARS:
            text = text[:MESSAGE_EXCERPT_CHARS] + "…"
        lines.append(f"{item.role}: {text}")
    transcript = "\n\n".join(lines)
    return [
        {"role": "system", "content": SUMMARY_PROMPT},
        {"role": "user", "content": f"New messages:\n\n{transcript}\n\n"
                                    f"Summary so far: {previous or '(none yet)'}"},
    ]


def clean_summary(raw: str, max_chars: int = SUMMARY_MAX_CHARS) -> str | None:
    """Markers removed (the same filter as every answer), trimmed and capped; None if empty."""
    text = clean_and_strip_markers(raw).text.strip()
    if len(text) > max_chars:
        text = text[: max_chars - 1].rstrip() + "…"
    return text or None


def covered_until(messages: Sequence[Message]) -> datetime.datetime | None:
    """The newest message time a stored summary covers, from the newest assistant message
    whose completed summary call recorded it; None when there is none."""
    for message in reversed(messages):
        if message.role != "assistant":
            continue
        details = _details(message.meta)
        if details is not None:
            try:
                covered = datetime.datetime.fromisoformat(details["covered_until"])
            except (KeyError, TypeError, ValueError):
                continue
            if covered.tzinfo is not None:  # a naive (hand-edited) time cannot be compared
                return covered
    return None


def _details(meta: Any) -> dict[str, Any] | None:
    """The details of a message's completed summary call; any other shape (old rows, hand
    edits) is no summary."""
    processing = meta.get("processingDetails") if isinstance(meta, dict) else None
    calls = processing.get("llm_calls") if isinstance(processing, dict) else None
    for call in calls if isinstance(calls, list) else []:
        if (isinstance(call, dict) and call.get("stage") == "summary"
                and call.get("status") == "complete" and isinstance(call.get("details"), dict)):
            details: dict[str, Any] = call["details"]
            return details
    return None


class SummaryStage:
    """Summarises what falls out of the context budget; stores it when the turn is stored."""

    def __init__(self, settings: Settings, db: Database, side_calls: SideCaller) -> None:
        self.settings = settings
        self.db = db
        self.side_calls = side_calls

    def open(self, view: TurnView) -> TurnHandler | None:
        if not self.settings.summary_calls:
            return None
        dropped = dropped_items(view.history, self.settings.context_budget_chars)
        return _SummaryHandler(self, view, dropped) if dropped else None


class _SummaryHandler(ThreadFieldHandler):
    def __init__(self, stage: SummaryStage, view: TurnView, dropped: list[ContextItem]) -> None:
        super().__init__(view.thread_id)
        self.stage = stage
        self.dropped = dropped

    async def before_main(self, draft: ContextDraft) -> None:
        try:
            since = await self._covered_until()
        except Exception as exc:  # the answer matters more than its summary
            log.exception("summary_skipped", error=type(exc).__name__)
            return
        new_items = [item for item in self.dropped if since is None or item.time > since]
        if not new_items:
            return
        call = SideCall(
            stage="summary", description="Summary of older turns",
            messages=summary_request(draft.summary, new_items),
            max_tokens=self.stage.settings.summary_max_tokens,
        )
        summarised = await self.stage.side_calls.value(draft, call, clean_summary)
        if summarised is None:
            return
        summary, record = summarised
        record.details.update({
            "covered_until": new_items[-1].time.isoformat(),
            "messages": len(new_items),
        })
        draft.summary = summary
        self.value = summary

    async def _covered_until(self) -> datetime.datetime | None:
        """A short read, before any upstream call (no session is held across it)."""
        async with self.stage.db.transaction() as session:
            recent = await message_store.context_history(
                session, self.thread_id, limit=COVERAGE_LOOKBACK
            )
        return covered_until(recent)

    async def store(self, session: AsyncSession, value: str) -> None:
        await thread_store.set_summary(session, self.thread_id, value)

    def log_stored(self, value: str) -> None:
        log.info("thread_summarised", chars=len(value))
