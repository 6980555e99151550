"""The `title` stage: on a thread's first turn, a short non-streamed call names the thread.

It runs before the main call (`before_main`). That costs the first turn of a thread the
title call's latency before the first token, and buys simplicity: the call's usage is known
before the turn's metadata is built, the upstream sees the calls in a fixed order, and a
client leaving during the title call needs no extra cleanup. The title is stored with
`threads.set_title` in the transaction that finishes the turn, so the thread list shows it
from the moment the answer is stored. A failed call fails nothing: it is logged, recorded
(status `failed`) and the thread keeps no title. Setting `title_calls=false` turns it off."""

from __future__ import annotations

import re

from sqlalchemy.ext.asyncio import AsyncSession

from app.config.settings import Settings
from app.core.cleaning import clean_and_strip_markers
from app.observe.logging import get_logger
from app.stream.plain import plain_text
from app.threads import repository as thread_store
from app.turn.observers.seam import ContextDraft, TurnHandler, TurnView
from app.turn.observers.stages.side_call import SideCall, SideCaller
from app.turn.observers.stages.thread_field import ThreadFieldHandler

log = get_logger("services.title")

TITLE_PROMPT = (
    "Write a short title, at most six words, for a conversation that starts with the "
    "user's message below. Answer with the title only: no quotes, no final punctuation."
)
#: Longest stored title (the API accepts 200; a list entry should stay short).
TITLE_MAX_CHARS = 80
#: How much of the first message the title call sees (the start is what names a topic).
TITLE_INPUT_CHARS = 2000

_QUOTES_AND_DECORATION = "\"'`“”„‘’«»*_ "
_LABEL = re.compile(r"^(?:title|thread title|subject)\s*:\s*", re.IGNORECASE)


def title_request(user_text: str) -> list[dict[str, str]]:
    """The messages of the title call."""
    return [
        {"role": "system", "content": TITLE_PROMPT},
        {"role": "user", "content": user_text[:TITLE_INPUT_CHARS]},
    ]


def clean_title(raw: str, max_chars: int = TITLE_MAX_CHARS) -> str | None:
    """What a model answered, made a title: markers removed (the same filter as every
    answer), the first non-empty line as plain words (markdown dropped wherever it is, as in
    the thread list's previews), a `Title:` label and surrounding quotes dropped, cut at a
    word boundary. None when nothing is left."""
    visible = clean_and_strip_markers(raw).text
    line = next((part for part in visible.splitlines() if plain_text(part)), "")
    text = _LABEL.sub("", plain_text(line))
    text = text.strip(_QUOTES_AND_DECORATION).rstrip(". ")
    text = text.strip(_QUOTES_AND_DECORATION)
    if len(text) > max_chars:
        cut = text[: max_chars - 1]
        if " " in cut:
            cut = cut.rsplit(" ", 1)[0]
        text = cut.rstrip(_QUOTES_AND_DECORATION + ",;:-") + "…"
    return text or None


class TitleStage:
    """Names a thread on its first turn (no earlier message, no title yet)."""

    def __init__(self, settings: Settings, side_calls: SideCaller) -> None:
        self.settings = settings
        self.side_calls = side_calls

    def open(self, view: TurnView) -> TurnHandler | None:
        if not self.settings.title_calls or view.thread_title or view.history:
            return None
        return _TitleHandler(self, view)


class _TitleHandler(ThreadFieldHandler):
    def __init__(self, stage: TitleStage, view: TurnView) -> None:
        super().__init__(view.thread_id)
        self.stage = stage
        self.user_text = view.user_text

    async def before_main(self, draft: ContextDraft) -> None:
        call = SideCall(
            stage="title", description="Thread title", messages=title_request(self.user_text),
            max_tokens=self.stage.settings.title_max_tokens,
        )
        if (named := await self.stage.side_calls.value(draft, call, clean_title)) is not None:
            self.value = named[0]

    async def store(self, session: AsyncSession, value: str) -> None:
        await thread_store.set_title(session, self.thread_id, value)

    def log_stored(self, value: str) -> None:
        log.info("thread_titled", chars=len(value))  # the title is the user's words
