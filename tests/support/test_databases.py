"""When PostgreSQL tests skip and when they fail: only an absent server is a reason to skip;
and a test of what PostgreSQL alone has is collected for it alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests.support import databases
from tests.support.databases import require_postgres

UNREACHABLE_URL = "postgresql://postgres@127.0.0.1:1/test"  # nothing listens on port 1


def first_check_on(monkeypatch: pytest.MonkeyPatch, admin_url: str) -> None:
    """Make the next require_postgres() check admin_url afresh (all restored after the test)."""
    monkeypatch.setattr(databases, "PG_ADMIN_URL", admin_url)
    monkeypatch.setattr(databases._State, "pg_checked", False)
    monkeypatch.setattr(databases._State, "pg_error", None)
    monkeypatch.setattr(databases._State, "pg_refused", None)
    monkeypatch.setattr(databases._State, "pg_skipped", 0)
    monkeypatch.delenv("CHATGATE_REQUIRE_POSTGRES", raising=False)


def on_the_real_server(*, database: str | None = None, username: str | None = None) -> str:
    """The configured admin URL with another database or role; the server must answer."""
    require_postgres()
    url = make_url(databases.PG_ADMIN_URL).set(password="not-shown-anywhere")
    if database is not None:
        url = url.set(database=database)
    if username is not None:
        url = url.set(username=username)
    return url.render_as_string(hide_password=False)


def outcome() -> BaseException:
    """What require_postgres() does to the calling test: skip or fail."""
    try:
        require_postgres()
    except (pytest.skip.Exception, pytest.fail.Exception) as stopped:
        return stopped
    raise AssertionError("require_postgres() let the test run")


def failure() -> str:
    stopped = outcome()
    assert isinstance(stopped, pytest.fail.Exception), f"not a failure: {stopped!r}"
    return str(stopped)


def test_an_unreachable_server_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    first_check_on(monkeypatch, UNREACHABLE_URL)
    with pytest.warns(UserWarning, match="SKIPPED"):
        stopped = outcome()
    assert isinstance(stopped, pytest.skip.Exception), f"not a skip: {stopped!r}"
    assert "ConnectionRefusedError" in str(stopped)


def test_an_unreachable_server_fails_when_postgres_is_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first_check_on(monkeypatch, UNREACHABLE_URL)
    monkeypatch.setenv("CHATGATE_REQUIRE_POSTGRES", "1")
    assert "CHATGATE_REQUIRE_POSTGRES=1" in failure()


def test_a_missing_database_fails_with_the_servers_error(monkeypatch: pytest.MonkeyPatch) -> None:
    first_check_on(monkeypatch, on_the_real_server(database="cg_no_such_db"))
    message = failure()
    assert 'InvalidCatalogNameError: database "cg_no_such_db" does not exist' in message
    assert "not-shown-anywhere" not in message
    assert failure() == message  # and so does every later PostgreSQL test


def test_an_unknown_role_fails_with_the_servers_error(monkeypatch: pytest.MonkeyPatch) -> None:
    first_check_on(monkeypatch, on_the_real_server(username="cg_no_such_role"))
    assert 'role "cg_no_such_role" does not exist' in failure()


def test_a_postgres_only_test_is_collected_for_postgresql_alone(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No SQLite variant to skip on every machine; the PostgreSQL one keeps its id and mark."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    pytester.makepyfile(test_some="""
        import pytest
        from tests.support.databases import postgres_only

        @postgres_only("row locks are PostgreSQL's")
        def test_locks(database_url):
            pass

        def test_both(database_url):
            pass
    """)
    result = pytester.runpytest_subprocess("-p", "tests.support.databases", "--collect-only",
                                           "-q", "-m", "postgres", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["test_some.py::test_locks[[]postgresql[]]",
                                 "test_some.py::test_both[[]postgresql[]]",
                                 "2/3 tests collected (1 deselected)*"])
