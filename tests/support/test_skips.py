"""The skip ledger: a skip in an xdist worker shows in the controller's summary, and with
CHATGATE_REQUIRE_NO_SKIPS=1 fails the run unless its reason is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.skips import STRICT_SWITCH, allowed, skip_reason

ROOT = Path(__file__).resolve().parents[2]

SKIPPING = """
import pytest

def test_runs():
    pass

def test_needs_a_server():
    pytest.skip("no server here: its test skipped")

@pytest.mark.parametrize("n", [1, 2])
def test_needs_a_second_core(n):
    pytest.skip("one core: nothing to split")
"""


def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *, strict: bool,
        source: str = SKIPPING, in_a_worker: bool = False) -> pytest.RunResult:
    """The plugin in a pytest of its own: in a process of its own with an xdist worker, as
    scripts/test runs it, or in this process (quick) for what does not depend on workers."""
    if strict:
        monkeypatch.setenv(STRICT_SWITCH, "1")
    else:
        monkeypatch.delenv(STRICT_SWITCH, raising=False)
    pytester.makepyfile(test_some=source)
    if not in_a_worker:
        return pytester.runpytest_inprocess("-p", "tests.support.skips",
                                            "-p", "no:cacheprovider", "-p", "no:asyncio")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return pytester.runpytest_subprocess("-p", "tests.support.skips", "-n", "1",
                                         "-p", "no:cacheprovider", "-p", "no:asyncio",
                                         timeout=120)


def test_a_skip_in_a_worker_is_counted_in_the_summary(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run(pytester, monkeypatch, strict=False, in_a_worker=True)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([
        "*3 test(s) SKIPPED: they did NOT run*makes this a failure*",
        "2 x one core: nothing to split  (e.g. test_some.py::test_needs_a_second_core*",
        "1 x no server here: its test skipped  (e.g. test_some.py::test_needs_a_server)",
    ])


def test_a_skip_not_allowed_fails_a_strict_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run(pytester, monkeypatch, strict=True)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"*1 not allowed with {STRICT_SWITCH}=1: the run FAILS*"])


def test_an_allowed_skip_passes_a_strict_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    allowed_only = SKIPPING.replace('pytest.skip("no server here: its test skipped")', "pass")
    result = run(pytester, monkeypatch, strict=True, source=allowed_only)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*2 test(s) SKIPPED: they did NOT run*"])


def test_a_skips_reason_is_read_from_a_report_made_here_or_in_a_worker() -> None:
    here = pytest.TestReport("t.py::test", ("t.py", 3, "test"), {}, "skipped",
                             ("t.py", 4, "Skipped: no server here"), "call")
    from_a_worker = pytest.TestReport("t.py::test", ("t.py", 3, "test"), {}, "skipped",
                                      ["t.py", 4, "Skipped: no server here"], "call")
    assert skip_reason(here) == skip_reason(from_a_worker) == "no server here"


def test_only_the_listed_reasons_are_allowed() -> None:
    assert allowed("one core: nothing to split")
    assert not allowed("PostgreSQL at postgresql://postgres@127.0.0.1:5432/test unreachable")
    assert not allowed("no Redis at redis://127.0.0.1:6379/15 (ConnectionError)")
