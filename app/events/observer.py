"""Announces a finished turn's visible messages on the bus (its user message unless
synthetic, and the assistant reply), from the transaction that stores them."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from app.events.bus import MessageBus
from app.events.notices import MessageNotice
from app.services.observers import TurnObserver
from app.services.turn import Turn
from app.store.visibility import is_hidden
from app.turns.records import FinishedMessage


def turn_notice(turn: Turn) -> MessageNotice:
    ids = [] if is_hidden(turn.user_message) else [turn.user_message.id]
    ids.append(turn.message_id)
    return MessageNotice(turn.thread.id, tuple(ids))


class MessageEvents(TurnObserver):
    def __init__(self, bus: MessageBus) -> None:
        self.bus = bus

    async def in_finish_transaction(
        self, session: AsyncSession, turn: Turn, finished: FinishedMessage
    ) -> None:
        await self.bus.announce_in_transaction(session, turn_notice(turn))

    async def after_finish(self, turn: Turn, finished: FinishedMessage) -> None:
        self.bus.announce_after_commit(turn_notice(turn))
