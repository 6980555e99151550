"""The slowest modules first, so the workers end together.

scripts/test runs the suite with `--dist loadscope`: each module is one unit of work, handed
to the next free worker in collection order. In path order the heaviest modules (the browser,
gateway processes, the fuzz, the bench scripts, the properties) came last, and one worker
could be left alone with a minute-long module while the others had finished. Handed out
longest first, the many short modules fill the gaps at the end (the longest-first rule for
scheduling jobs on identical machines).

SLOW_FIRST lists modules and folders by what they cost on this machine (pytest --durations);
the rest keep their collection order after them, and each module keeps its tests' order, so
a module-scoped fixture is still set up once. A stale entry costs a little balance, nothing
more.
"""

from __future__ import annotations

import pytest

SLOW_FIRST: tuple[str, ...] = (
    "tests/scripts/test_bench_scripts.py",
    "tests/web/test_page_items.py",
    "tests/openapi/test_fuzz.py",
    "tests/turn/openai/test_responses_sdk.py",
    "tests/stream/test_json_prefix.py",
    "tests/stream/test_properties.py",
    "tests/scripts/test_bad_settings.py",
    "tests/web/test_page_edges.py",
    "tests/e2e/test_failures.py",
    "tests/turn/admission/test_gate.py",
    "tests/e2e/test_resume_across_gateways.py",
    "tests/e2e/test_database_partition.py",
    "tests/stream/test_reasoning_properties.py",
    "tests/turn/openai/test_responses_node.py",
    "tests/scripts/test_bench_openai.py",
    "tests/e2e/test_crash_recovery.py",
    "tests/e2e/test_stream_cap_across_gateways.py",
    "tests/turn/openai/test_litellm_client.py",
    "tests/web/",
    "tests/e2e/",
    "tests/scripts/",
    "tests/turn/openai/",
    "tests/followups/",
)


def rank(nodeid: str) -> int:
    """Where a test's module goes: its place in SLOW_FIRST, or after all of them."""
    for place, prefix in enumerate(SLOW_FIRST):
        if nodeid.startswith(prefix):
            return place
    return len(SLOW_FIRST)


@pytest.hookimpl(trylast=True)  # after pytest has grouped the items by their fixtures
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: rank(item.nodeid))  # stable: a module stays in one piece
