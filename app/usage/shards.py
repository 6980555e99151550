"""Which row of a (user, period, model) rollup a finish adds to.

The rollup is kept in up to ROLLUP_SHARDS rows that every reader sums
(app.usage.repository): an upsert holds its row's lock until its commit, so with one row a
user's finishes running at once took turns, in one process and across processes.
"""

from __future__ import annotations

import itertools
import os

#: How many rows one (user, period, model) rollup is spread over, at most.
ROLLUP_SHARDS = 16


class RollupShards:
    """The shards a process's finishes add to: the next one at each finish, from `first` (the
    process's pid by default, so that processes start apart). Up to ROLLUP_SHARDS finishes
    of a process running at once never share a row; two processes' finishes meet on one by
    chance only, and then count right all the same, one waiting for the other's commit."""

    def __init__(self, first: int | None = None) -> None:
        self._next = itertools.count(os.getpid() if first is None else first)

    def take(self) -> int:
        return next(self._next) % ROLLUP_SHARDS
