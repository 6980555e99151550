"""PostgreSQL LISTEN/NOTIFY: how gateway processes tell each other that a thread got a new
message. NOTIFY inside a transaction is delivered only when (and if) it commits, so a listener
never hears of a row it cannot read yet. SQLite has no such thing (app.events delivers in
process there)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.db import Database

#: The longest payload PostgreSQL accepts is just under 8000 bytes; ours are ids only.
MAX_PAYLOAD_BYTES = 7900

Callback = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Notification:
    """A NOTIFY for a statement of the store to send (the finish's, app.turn.rows.messages):
    delivered, as any NOTIFY, when (and if) its transaction commits."""

    channel: str
    payload: str

    def __post_init__(self) -> None:
        if len(self.payload.encode("utf-8")) > MAX_PAYLOAD_BYTES:
            raise ValueError(f"NOTIFY payload of {len(self.payload)} characters is too long")


class Listener:
    """One pooled connection taken out of the engine for good, LISTENing on a channel through
    asyncpg's add_listener (the driver connection behind SQLAlchemy's adapter)."""

    def __init__(self, connection: AsyncConnection, driver: Any, channel: str,
                 handler: Callable[..., None]) -> None:
        self._connection = connection
        self._driver = driver
        self._channel = channel
        self._handler = handler

    @property
    def is_closed(self) -> bool:
        return bool(self._driver.is_closed())

    async def close(self) -> None:
        """Stop listening; the connection is discarded, not returned to the pool."""
        try:
            if not self.is_closed:
                await self._driver.remove_listener(self._channel, self._handler)
        finally:
            await self._connection.invalidate()
            await self._connection.close()


async def open_listener(db: Database, channel: str, callback: Callback) -> Listener:
    """LISTEN on channel; callback(payload) runs in the event loop for each notification."""

    def handler(_connection: Any, _pid: int, _channel: str, payload: str) -> None:
        callback(payload)

    connection = await db.engine.connect()
    try:
        raw = await connection.get_raw_connection()
        driver: Any = raw.driver_connection
        await driver.add_listener(channel, handler)
    except BaseException:
        await connection.invalidate()
        await connection.close()
        raise
    return Listener(connection, driver, channel, handler)
