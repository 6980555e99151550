"""Members grouped by a key, each for as long as a block runs: an event stream's queue under
its thread (app.events.bus), an open stream's callback under its API key
(app.keys.revocation). A key leaves with its last member, so the keys are always those with
someone waiting."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V", bound=Hashable)


class KeyedSets(Generic[K, V]):
    """`with sets.member(key, value): ...` adds `value` under `key` for the block."""

    def __init__(self) -> None:
        self._sets: dict[K, set[V]] = {}

    @contextmanager
    def member(self, key: K, value: V) -> Iterator[None]:
        self._sets.setdefault(key, set()).add(value)
        try:
            yield
        finally:
            members = self._sets.get(key)
            if members is not None:
                members.discard(value)
                if not members:
                    del self._sets[key]

    def members(self, key: K) -> list[V]:
        """A copy of `key`'s members: one may leave while the caller goes through them."""
        return list(self._sets.get(key, ()))

    def count(self, key: K) -> int:
        return len(self._sets.get(key, ()))

    def take(self, key: K) -> set[V]:
        """`key`'s members, removed: their blocks leave nothing more to remove."""
        return self._sets.pop(key, set())

    def keys(self) -> set[K]:
        return set(self._sets)

    def __len__(self) -> int:
        """How many keys have members."""
        return len(self._sets)
