"""A Redis test without a Redis server: skipped on a developer's machine, a failure where
CHATGATE_REQUIRE_REDIS=1 (CI) says every Redis test must run."""

from __future__ import annotations

import pytest

from tests.support.redis_keys import redis_missing


def test_a_missing_redis_skips_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHATGATE_REQUIRE_REDIS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="Redis test skipped"):
        redis_missing(ConnectionRefusedError(111, "refused"))


def test_a_missing_redis_fails_the_test_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATGATE_REQUIRE_REDIS", "1")
    with pytest.raises(pytest.fail.Exception, match="CHATGATE_REQUIRE_REDIS=1"):
        redis_missing(ConnectionRefusedError(111, "refused"))
