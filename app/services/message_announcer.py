"""Announces a finished turn's visible messages on the message bus (its user message unless
hidden, and the assistant reply), from the transaction that stores them, so open thread
event streams (in this process or, on PostgreSQL, any other) show them."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from app.events.bus import MessageBus
from app.events.notices import MessageNotice
from app.records import FinishedMessage
from app.services.observers import TurnHandler, TurnView
from app.store.messages import FinishedRow
from app.turns.finish import TurnOutcome


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
    #: NOTIFY's channel is fixed and its payload's length checked before it is sent; its one
    #: failure left, a full queue, comes at commit, where a savepoint would not help.
    savepoint_in_finish = False

    def __init__(self, bus: MessageBus, notice: MessageNotice) -> None:
        self.bus = bus
        self.notice = notice

    async def in_finish_transaction(
        self, session: AsyncSession, finished: FinishedMessage, outcome: TurnOutcome,
        row: FinishedRow,
    ) -> None:
        await self.bus.announce_in_transaction(session, self.notice)

    def writes_in_finish(self, finished: FinishedMessage, row: FinishedRow) -> bool:
        """Only a bus that announces inside the transaction (PostgreSQL's NOTIFY)."""
        return type(self.bus).announce_in_transaction is not MessageBus.announce_in_transaction

    async def after_finish(
        self, finished: FinishedMessage, outcome: TurnOutcome, *, stored: bool
    ) -> None:
        if stored:
            self.bus.announce_after_commit(self.notice)
