"""Announces a finished turn's visible messages on the message bus (its user message unless
hidden, and the assistant reply) once the transaction that stores them committed, so open
thread event streams (in this process or, on PostgreSQL, any other) show them."""

from __future__ import annotations

from app.answer.finish import TurnOutcome
from app.answer.records import FinishedMessage
from app.events.bus import MessageBus
from app.events.notices import MessageNotice
from app.turn.observers.seam import TurnHandler, TurnView


def turn_notice(view: TurnView) -> MessageNotice:
    ids = [] if view.hidden else [view.user_message_id]
    ids.append(view.message_id)
    return MessageNotice(view.thread_id, tuple(ids))


class MessageAnnouncer:
    def __init__(self, bus: MessageBus) -> None:
        self.bus = bus

    def open(self, view: TurnView) -> TurnHandler:
        return _AnnounceHandler(self.bus, turn_notice(view))


class _AnnounceHandler(TurnHandler):
    def __init__(self, bus: MessageBus, notice: MessageNotice) -> None:
        self.bus = bus
        self.notice = notice

    async def after_finish(
        self, finished: FinishedMessage, outcome: TurnOutcome, *, stored: bool
    ) -> None:
        if stored:
            self.bus.announce_after_commit(self.notice)
