"""PostgreSQL LISTEN/NOTIFY: how gateway processes tell each other that a thread got a new
message. The NOTIFY is a statement of its own, sent once the messages' transaction has
committed (a listener never hears of a row it cannot read yet), never a statement of that
transaction: a transaction that sends NOTIFY takes PostgreSQL's one database-wide notify lock
at commit and holds it to the end of its commit, so every writing transaction that notifies
waits on every other: scripts/bench_notify.sh measures about a third of the commits a second
with a NOTIFY in each transaction, three quarters with it after each commit. SQLite has no
such thing (app.events delivers in process there)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import String, bindparam, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.db import Database
from app.store.driver_statements import DriverStatement

#: The longest payload PostgreSQL accepts is just under 8000 bytes; ours are ids only.
MAX_PAYLOAD_BYTES = 7900

Callback = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Notification:
    """A NOTIFY to send (send()): its channel and payload, checked when made."""

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


#: One NOTIFY in autocommit (parameters `channel`, `payload`).
_NOTIFY = DriverStatement(select(func.pg_notify(bindparam("channel", type_=String()),
                                                bindparam("payload", type_=String()))))


async def send(db: Database, notification: Notification) -> None:
    """The NOTIFY sent on its own, in one autocommit statement."""
    async with db.one_statement() as runner:
        await _NOTIFY.rows(runner, {"channel": notification.channel,
                                    "payload": notification.payload})
