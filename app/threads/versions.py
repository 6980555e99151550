"""A thread's tree, worked out from its rows: which messages are versions of one another
(the same parent, the same role and kind: a regenerated answer beside the answer it
replaced, an edited question beside the question), and which branch showing a version
brings. Pure: the rows come from app.threads.branch_repository."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TreeRow:
    """One message of a thread, as its place in the tree needs it."""

    id: uuid.UUID
    parent_id: uuid.UUID | None
    role: str
    synthetic: bool


@dataclass(frozen=True, slots=True)
class Versions:
    """A message's versions, oldest first, the message's own among them."""

    ids: tuple[uuid.UUID, ...]

    def number_of(self, message_id: uuid.UUID) -> int:
        """The message's version, counted from 1."""
        return self.ids.index(message_id) + 1


def versions_of(rows: Sequence[TreeRow]) -> dict[uuid.UUID, Versions]:
    """Each message's versions. `rows` oldest first (a version's number is its place in
    time)."""
    groups: dict[tuple[uuid.UUID | None, str, bool], list[uuid.UUID]] = {}
    for row in rows:
        groups.setdefault((row.parent_id, row.role, row.synthetic), []).append(row.id)
    found: dict[uuid.UUID, Versions] = {}
    for ids in groups.values():
        versions = Versions(tuple(ids))
        for message_id in ids:
            found[message_id] = versions
    return found


def newest_leaf(rows: Sequence[TreeRow], start: uuid.UUID) -> uuid.UUID:
    """Where the branch through `start` ends when it is shown: below `start`, the newest
    child at each step (what was written last under that version). `rows` oldest first."""
    newest_child: dict[uuid.UUID | None, uuid.UUID] = {}
    for row in rows:
        newest_child[row.parent_id] = row.id  # oldest first: the last one seen is newest
    leaf = start
    while leaf in newest_child:
        leaf = newest_child[leaf]
    return leaf
