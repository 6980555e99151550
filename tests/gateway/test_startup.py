"""The sentence of a refused setting is built from pydantic's own error, so a setting added
later gets one without code in app.gateway.startup: a bound, a boolean, a Literal, a validator's
ValueError. Secrets in a refused value are never repeated."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app.config.settings import Settings
from app.gateway.startup import settings_sentence


def sentence(monkeypatch: pytest.MonkeyPatch, **env: str) -> str:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as refused:
        Settings(_env_file=None)  # type: ignore[call-arg]
    return settings_sentence(refused.value)


@pytest.mark.parametrize(("env", "expected"), [
    ({"CHATGATE_MAX_ANSWER_S": "0"}, "CHATGATE_MAX_ANSWER_S must be a number above 0, not '0'"),
    ({"CHATGATE_WORKERS": "65"}, "CHATGATE_WORKERS must be a number at most 64, not '65'"),
    ({"CHATGATE_UPSTREAM_MAX_TOKENS": "many"},
     "CHATGATE_UPSTREAM_MAX_TOKENS must be a whole number, not 'many'"),
    ({"CHATGATE_TITLE_CALLS": "maybe"}, "CHATGATE_TITLE_CALLS must be true or false, not 'maybe'"),
    ({"CHATGATE_LOG_FORMAT": "xml"},
     "CHATGATE_LOG_FORMAT must be auto, json or console, not 'xml'"),
    ({"CHATGATE_REDIS_URL": "localhost:6379"},
     "CHATGATE_REDIS_URL must be a Redis URL such as redis://127.0.0.1:6379/0, "
     "not 'localhost:6379'"),
    # Named as the operator wrote it, the password hidden.
    ({"DATABASE_URL": "mysql://app:s3cret@db/chatgate"},
     "DATABASE_URL must be a PostgreSQL or SQLite URL (postgresql+asyncpg://user@host:5432/name"
     " or sqlite+aiosqlite:///path/to/file.db), not 'mysql://app:***@db/chatgate'"),
    # The key belongs in its own setting; neither the user nor the password is repeated.
    ({"CHATGATE_UPSTREAM_BASE_URL": "https://me:hunter2@api.example.com/v1"},
     "CHATGATE_UPSTREAM_BASE_URL must be an http(s) URL without a user name and password "
     "(the key goes in CHATGATE_UPSTREAM_API_KEY), not 'https://***@api.example.com/v1'"),
])
def test_a_refused_setting_is_one_sentence(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    monkeypatch.delenv("CHATGATE_DATABASE_URL", raising=False)
    assert sentence(monkeypatch, **env) == expected


def test_a_price_file_that_is_not_a_price_table_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text('{"gpt-4o": {"prompt": 2.5}}')
    assert sentence(monkeypatch, CHATGATE_PRICE_FILE=str(prices)) == (
        f"CHATGATE_PRICE_FILE must be a readable JSON price file, not '{prices}': "
        "price of 'gpt-4o' needs numeric 'prompt' and 'completion'")


def test_the_log_level_is_read_in_any_case() -> None:
    assert Settings(log_level="debug").log_level == "DEBUG"
    assert Settings(upstream_base_url="").upstream_base_url is None


def test_a_pooler_without_a_direct_listen_url_is_one_sentence(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CHATGATE_DATABASE_LISTEN_URL", raising=False)
    monkeypatch.delenv("CHATGATE_REDIS_URL", raising=False)
    assert sentence(monkeypatch, CHATGATE_DATABASE_POOLER="pgbouncer") == (
        "CHATGATE_DATABASE_POOLER must be none unless CHATGATE_REDIS_URL is set (the events "
        "bus then goes through Redis) or CHATGATE_DATABASE_LISTEN_URL names a direct "
        "PostgreSQL URL for it (LISTEN does not work through transaction pooling), not "
        "'pgbouncer'")
    with_redis = Settings(database_pooler="pgbouncer", redis_url="redis://127.0.0.1:6379/0")
    assert with_redis.database_pooler == "pgbouncer"
    assert sentence(monkeypatch, CHATGATE_DATABASE_LISTEN_URL="sqlite:///x.db") == (
        "CHATGATE_DATABASE_LISTEN_URL must be a PostgreSQL URL "
        "(postgresql+asyncpg://user@host:5432/name), not 'sqlite:///x.db'")


def test_a_fence_that_would_end_answers_after_the_takeover_is_one_sentence(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CHATGATE_PROCESS_FENCE_AFTER_S", "CHATGATE_HEARTBEAT_S"):
        monkeypatch.delenv(name, raising=False)
    assert sentence(monkeypatch, CHATGATE_PROCESS_DEAD_AFTER_S="10",
                    CHATGATE_PROCESS_FENCE_AFTER_S="9.5") == (
        "CHATGATE_PROCESS_FENCE_AFTER_S must be above CHATGATE_HEARTBEAT_S (2) and at most "
        "CHATGATE_PROCESS_DEAD_AFTER_S less 1 s (9): a process cut off from the database must "
        "end its answers before another may take them over, not '9.5'")


def test_the_fence_is_derived_from_dead_after_and_checked_against_the_heartbeat(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CHATGATE_PROCESS_FENCE_AFTER_S", "CHATGATE_HEARTBEAT_S",
                 "CHATGATE_PROCESS_DEAD_AFTER_S"):
        monkeypatch.delenv(name, raising=False)
    assert Settings(_env_file=None).process_fence_after_s == 5.0  # type: ignore[call-arg]
    assert sentence(monkeypatch, CHATGATE_HEARTBEAT_S="2",
                    CHATGATE_PROCESS_DEAD_AFTER_S="3") == (
        "CHATGATE_PROCESS_FENCE_AFTER_S must be above CHATGATE_HEARTBEAT_S (2) and at most "
        "CHATGATE_PROCESS_DEAD_AFTER_S less 0.5 s (2.5): a process cut off from the database "
        "must end its answers before another may take them over, not '1.5 (half of "
        "CHATGATE_PROCESS_DEAD_AFTER_S, when unset)'")
