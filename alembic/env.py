"""Alembic environment, async (asyncpg / aiosqlite).

URL, first match wins: a connection handed over by app.store.migrations (config.attributes
["connection"]), `-x url=...`, config.attributes["url"], the settings' database_url.
SQLite uses batch mode (ALTER TABLE is limited there) and runs with foreign keys off, so that a
batch table copy cannot cascade-delete child rows.
"""

from __future__ import annotations

import asyncio
from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.pool import NullPool

from app.config.database_urls import async_url
from app.config.settings import get_settings
from app.store.db import create_engine_for
from app.store.migrations import include_object_for
from app.store.models import Base

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str:
    x_url = context.get_x_argument(as_dictionary=True).get("url")
    url = x_url or config.attributes.get("url") or get_settings().database_url
    return async_url(url).render_as_string(hide_password=False)


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_object=include_object_for(connection.dialect.name),
    )


def do_run_migrations(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


async def run_async_migrations() -> None:
    engine = create_engine_for(_url(), sqlite_foreign_keys=False, poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(do_run_migrations)
    finally:
        await engine.dispose()


def run_migrations_offline() -> None:
    url = _url()
    context.configure(
        url=url,
        target_metadata=Base.metadata,
        literal_binds=True,
        include_object=include_object_for(make_url(url).get_backend_name()),
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        asyncio.run(run_async_migrations())
    else:
        do_run_migrations(connection)


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
