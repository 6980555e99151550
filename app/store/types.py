"""Column types that behave the same on PostgreSQL and SQLite."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, DateTime
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

UTC = dt.UTC


class UtcDateTime(TypeDecorator[dt.datetime]):
    """A timestamp that is aware UTC going in and coming out, on both backends.

    PostgreSQL stores `timestamptz`. SQLite has no time zones, so the value is stored as naive
    UTC text (fixed width, so text order is time order) and made aware again on the way out.
    Naive datetimes are refused: guessing their zone is how timestamps silently shift.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value!r}: the store only takes aware UTC")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if not isinstance(value, dt.datetime):
            raise TypeError(f"expected a datetime from the database, got {type(value).__name__}")
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


# JSONB on PostgreSQL (indexable with GIN, compact), JSON text on SQLite: one type.
JsonDocument = JSON().with_variant(JSONB(), "postgresql")
