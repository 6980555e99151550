"""What a PostgreSQL server allows: its connection limit and the slots it keeps back, read
at start to check that a deployment's pools fit (app.config.database_budget)."""

from __future__ import annotations

from sqlalchemy import text

from app.config.database_budget import ServerConnections
from app.store.db import Database

#: `reserved_connections` exists from PostgreSQL 16 on; current_setting(..., true) is NULL
#: before (missing_ok).
SERVER_CONNECTIONS = text(
    "SELECT current_setting('max_connections')::int, "
    "current_setting('superuser_reserved_connections')::int, "
    "coalesce(nullif(current_setting('reserved_connections', true), ''), '0')::int")


async def server_connections(url: str) -> ServerConnections:
    """The server's figures, on a connection of its own (closed after)."""
    db = Database(url, postgres_pool_size=1)
    try:
        async with db.transaction() as session:
            row = (await session.execute(SERVER_CONNECTIONS)).one()
    finally:
        await db.dispose()
    return ServerConnections(max_connections=row[0], superuser_reserved=row[1],
                             reserved=row[2])
