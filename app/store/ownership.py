"""A row of the user's, found by its primary key alone.

`id = :id AND user_id = :user` offers PostgreSQL's planner two indexes: the primary key and
the user's own (ix_threads_user_updated, ix_messages_user_created). With statistics it takes
the key. A table never analysed (autovacuum off, a fresh restore or upgrade) gives both an
estimate of one row, and a generic plan made while the table was small may take the user's
index and keep it as the table grows: each lookup then reads every row of the user's (a
turn's opening read 2,500 buffers instead of a dozen on such a server). Here the row is
found by its key alone, in a MATERIALIZED CTE, which the planner does not look into, and its
owner is compared on the one row found. SQLite takes the key either way."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import CTE, ColumnElement, ScalarSelect, Table, select


def by_key(table: Table, row_id: ColumnElement[uuid.UUID] | uuid.UUID, name: str,
           *columns: ColumnElement[Any]) -> CTE:
    """`table`'s row `row_id`, found by its key alone: its `user_id` and `columns` (a
    statement that needs more of the row than its id reads it in this one probe). `name`:
    the CTE's, unique in the statement."""
    return (select(table.c.user_id, *columns).where(table.c.id == row_id)
            .cte(name).prefix_with("MATERIALIZED"))


def owned_id(table: Table, row_id: ColumnElement[uuid.UUID] | uuid.UUID,
             owner: ColumnElement[str] | str, name: str) -> ScalarSelect[Any]:
    """The id of `table`'s row `row_id` when `owner` owns it (its `user_id`), else NULL.
    `name`: the CTE's, unique in the statement."""
    found = by_key(table, row_id, name, table.c.id)
    return select(found.c.id).where(found.c.user_id == owner).scalar_subquery()
