"""KeyedSets: a member stays under its key for its block, and a key leaves with its last
member (the bus and the revocation watcher rely on both)."""

from __future__ import annotations

from app.kit.keyed_sets import KeyedSets


def test_a_key_leaves_with_its_last_member() -> None:
    sets: KeyedSets[str, int] = KeyedSets()
    with sets.member("a", 1):
        with sets.member("a", 2), sets.member("b", 3):
            assert sorted(sets.members("a")) == [1, 2] and sets.keys() == {"a", "b"}
            assert len(sets) == 2
        assert sets.members("a") == [1] and sets.count("b") == 0
    assert len(sets) == 0 and sets.keys() == set() and sets.members("a") == []


def test_taken_members_leave_nothing_for_their_blocks_to_remove() -> None:
    sets: KeyedSets[str, int] = KeyedSets()
    with sets.member("k", 1):
        assert sets.take("k") == {1}
        assert len(sets) == 0
    assert sets.take("k") == set() and len(sets) == 0
