"""Which messages a user sees. Strict: a message is synthetic only when the `synthetic` column is
true or its metadata's `synthetic` is the JSON value `true` (never "true", 1 or anything else);
legacy follow-up prompts stored in the content with the `[AUTONOMOUS_FOLLOWUP:` prefix are hidden
as well. The SQL condition and the Python predicate below must agree (tests check both)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Boolean, ColumnElement, and_, false, func, not_, or_
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from app.store.models import Message
from app.synthetic import LEGACY_SYNTHETIC_PREFIX, is_synthetic_metadata


class metadata_synthetic_is_true(FunctionElement[bool]):
    """`metadata.synthetic` is exactly JSON true (strict, per backend)."""

    type = Boolean()
    inherit_cache = True
    name = "metadata_synthetic_is_true"


@compiles(metadata_synthetic_is_true, "postgresql")
def _synthetic_pg(element: metadata_synthetic_is_true, compiler: SQLCompiler, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    return f"coalesce((({column}) -> 'synthetic') = 'true'::jsonb, false)"


@compiles(metadata_synthetic_is_true, "sqlite")
def _synthetic_sqlite(
    element: metadata_synthetic_is_true, compiler: SQLCompiler, **kw: Any
) -> str:
    column = compiler.process(element.clauses, **kw)
    return f"coalesce(json_type({column}, '$.synthetic') = 'true', 0)"


def is_legacy_synthetic_sql() -> ColumnElement[bool]:
    """Content starts with the legacy prefix. substr, not LIKE: `_` is a LIKE wildcard and
    SQLite's LIKE ignores case."""
    prefix = LEGACY_SYNTHETIC_PREFIX
    return func.substr(Message.content, 1, len(prefix)) == prefix


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
        or message.content.startswith(LEGACY_SYNTHETIC_PREFIX)
    )
