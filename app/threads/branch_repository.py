"""A thread as a tree, read: a message's `parent_id` says what it follows, `on_branch` marks
the thread's current branch (the path the page shows and the model is shown). The walks up
and down the tree are recursive CTEs both databases run; the moves of the branch are the
turn repository's writes (app.turn.rows.branches)."""

from __future__ import annotations

import uuid

from sqlalchemy import CTE, BindParameter, ScalarSelect, Select, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.store.models import Message, table_of
from app.threads.versions import TreeRow

_MESSAGES = table_of(Message)


def path_to(end: BindParameter[uuid.UUID], name: str = "path") -> CTE:
    """`end` and every message it follows, back to the thread's first (id, parent_id):
    the branch that ends at `end`, empty for a NULL `end`."""
    m = _MESSAGES
    anchor = select(m.c.id, m.c.parent_id).where(m.c.id == end).cte(name, recursive=True)
    up = m.alias(f"{name}_up")
    return anchor.union_all(
        select(up.c.id, up.c.parent_id).join(anchor, up.c.id == anchor.c.parent_id))


def _subtree(root: BindParameter[uuid.UUID]) -> CTE:
    """`root` and every message that follows it, however far down (id)."""
    m = _MESSAGES
    anchor = select(m.c.id).where(m.c.id == root).cte("subtree", recursive=True)
    down = m.alias("subtree_down")
    return anchor.union_all(select(down.c.id).join(anchor, down.c.parent_id == anchor.c.id))


def branch_tip(thread_id: BindParameter[uuid.UUID]) -> ScalarSelect[uuid.UUID]:
    """The newest message on the thread's branch: what a new message follows (NULL in an
    empty thread). A branch is in time order: a message is created after its parent."""
    m = _MESSAGES
    return (select(m.c.id).where(m.c.thread_id == thread_id, m.c.on_branch)
            .order_by(m.c.created_at.desc(), m.c.id.desc()).limit(1).scalar_subquery())


def subtree_ids(root: uuid.UUID) -> Select[tuple[uuid.UUID]]:
    """The ids of `root` and of every message that follows it."""
    return select(_subtree(bindparam("subtree_of", root, type_=_MESSAGES.c.id.type)).c.id)


def path_ids(end: uuid.UUID) -> Select[tuple[uuid.UUID]]:
    """The ids of the branch that ends at `end`."""
    return select(path_to(bindparam("path_end", end, type_=_MESSAGES.c.id.type)).c.id)


async def tree_rows(s: AsyncSession, thread_id: uuid.UUID) -> list[TreeRow]:
    """Every message of the thread as the tree's shape needs it, oldest first."""
    m = _MESSAGES.c
    result = await s.execute(
        select(m.id, m.parent_id, m.role, m.synthetic)
        .where(m.thread_id == thread_id).order_by(m.created_at, m.id))
    return [TreeRow(*row) for row in result.all()]
