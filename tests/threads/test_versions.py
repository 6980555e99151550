"""A thread's tree worked out from its rows: versions are the messages with one parent, one
role and one kind; showing a version brings what was written last under it."""

from __future__ import annotations

import uuid

from app.threads.versions import TreeRow, newest_leaf, versions_of


def ids(count: int) -> list[uuid.UUID]:
    return [uuid.uuid4() for _ in range(count)]


def test_versions_are_siblings_of_one_role_and_kind_in_time_order() -> None:
    q, a1, a2, prompt, q2 = ids(5)
    rows = [TreeRow(q, None, "user", False), TreeRow(a1, q, "assistant", False),
            TreeRow(a2, q, "assistant", False),
            # a follow-up's hidden prompt and a question under the same answer differ in kind
            TreeRow(prompt, a2, "user", True), TreeRow(q2, a2, "user", False)]
    found = versions_of(rows)
    assert found[a2].ids == (a1, a2) and found[a2].number_of(a2) == 2
    assert found[a1].number_of(a1) == 1
    assert found[q2].ids == (q2,) and found[prompt].ids == (prompt,)
    assert found[q].ids == (q,)


def test_showing_a_version_brings_what_was_written_last_under_it() -> None:
    q, a1, a2, q1, b1, b2 = ids(6)
    rows = [TreeRow(q, None, "user", False), TreeRow(a1, q, "assistant", False),
            TreeRow(q1, a1, "user", False), TreeRow(b1, q1, "assistant", False),
            TreeRow(b2, q1, "assistant", False), TreeRow(a2, q, "assistant", False)]
    assert newest_leaf(rows, a1) == b2
    assert newest_leaf(rows, a2) == a2
    assert newest_leaf(rows, q) == a2  # the newest child of the question
