"""Which messages a user sees. Strict: a message is synthetic only when the `synthetic` column is
true or its metadata's `synthetic` is the JSON value `true` (never "true", 1 or anything else);
legacy follow-up prompts stored in the content with the `[AUTONOMOUS_FOLLOWUP:` prefix are hidden
as well, unless metadata says `synthetic: false` (a user's own words, stored by this gateway).
The SQL condition and the Python predicate below must agree (tests check both)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Boolean, ColumnElement, and_, false, func, not_, or_
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from app.core.synthetic import LEGACY_SYNTHETIC_PREFIX, is_legacy_synthetic, is_synthetic_metadata
from app.store.models import Message


class _MetadataSyntheticIs(FunctionElement[bool]):
    """`metadata.synthetic` is exactly the JSON boolean `json_value` (strict, per backend).
    One subclass per value: the value is part of the SQL text, so it must be part of the
    class for SQLAlchemy's statement cache."""

    type = Boolean()
    inherit_cache = True
    json_value = ""


class metadata_synthetic_is_true(_MetadataSyntheticIs):
    """Metadata marks a synthetic message."""

    inherit_cache = True
    name = "metadata_synthetic_is_true"
    json_value = "true"


class metadata_declared_real(_MetadataSyntheticIs):
    """Metadata says this gateway stored the message as written by a user."""

    inherit_cache = True
    name = "metadata_declared_real"
    json_value = "false"


@compiles(metadata_synthetic_is_true, "postgresql")
@compiles(metadata_declared_real, "postgresql")
def _synthetic_pg(element: _MetadataSyntheticIs, compiler: SQLCompiler, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    return f"coalesce((({column}) -> 'synthetic') = '{element.json_value}'::jsonb, false)"


@compiles(metadata_synthetic_is_true, "sqlite")
@compiles(metadata_declared_real, "sqlite")
def _synthetic_sqlite(element: _MetadataSyntheticIs, compiler: SQLCompiler, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    return f"coalesce(json_type({column}, '$.synthetic') = '{element.json_value}', 0)"


def is_legacy_synthetic_sql() -> ColumnElement[bool]:
    """SQL mirror of app.core.synthetic.is_legacy_synthetic. substr, not LIKE: `_` is a LIKE
    wildcard and SQLite's LIKE ignores case."""
    prefix = LEGACY_SYNTHETIC_PREFIX
    return and_(
        func.substr(Message.content, 1, len(prefix)) == prefix,
        not_(metadata_declared_real(Message.meta)),
    )


def hidden_sql() -> ColumnElement[bool]:
    """SQL: the message is hidden from the user's history, counts and previews."""
    return or_(
        Message.synthetic != false(),
        metadata_synthetic_is_true(Message.meta),
        is_legacy_synthetic_sql(),
    )


def visible_sql() -> ColumnElement[bool]:
    """SQL: the message belongs in the user's history."""
    return and_(
        Message.synthetic == false(),
        not_(metadata_synthetic_is_true(Message.meta)),
        not_(is_legacy_synthetic_sql()),
    )


def is_hidden(message: Message) -> bool:
    """Python mirror of hidden_sql() for a loaded message (e.g. to log what was filtered)."""
    return (
        message.synthetic is True
        or is_synthetic_metadata(message.meta)
        or is_legacy_synthetic(message.content, message.meta)
    )
