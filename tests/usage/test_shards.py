"""A process's finishes take the rollup's shards in turn, from the process's pid: finishes
running at once in a process never share a row, and processes start apart."""

from __future__ import annotations

import os

from app.usage.shards import ROLLUP_SHARDS, RollupShards


def test_the_shards_are_taken_in_turn_and_wrap() -> None:
    shards = RollupShards(14)
    assert [shards.take() for _ in range(ROLLUP_SHARDS + 2)] == [
        14, 15, *range(14), 14, 15]


def test_a_process_starts_from_its_pid() -> None:
    assert RollupShards().take() == os.getpid() % ROLLUP_SHARDS
