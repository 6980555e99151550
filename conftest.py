"""Root conftest: registers the shared fixture modules so every test directory can use them,
and keeps one test's logging configuration from leaking into the next."""

from collections.abc import Iterator

import pytest
import structlog

pytest_plugins = [
    "pytester",  # tests of the suite's own plugins (tests/support/test_skips.py)
    "tests.support.browser",
    "tests.support.databases",
    "tests.support.gateway.fixtures",
    "tests.support.redis_keys",
    "tests.support.scheduling",
    "tests.support.skips",
]


@pytest.fixture(autouse=True)
def _structlog_config_restored() -> Iterator[None]:
    """An app built with log_level=WARNING configures structlog process-wide; a later test
    capturing an INFO line would silently see nothing."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)
