"""Every skipped test counted where the run ends, and in CI a failure unless allowed.

A test skips when something it needs is missing: PostgreSQL, Redis, Chromium, an outside
client. On a developer's machine that is a skip, but one nobody sees is a test nobody ran:
under pytest-xdist a skip happens in a worker process, whose own counters never reach the
terminal. The reports do: every worker's report of every test comes back to the process that
prints the summary (the controller, or the only process with -n 0), so the skips are counted
there, from the reports, and summed up in one red block grouped by reason.

With CHATGATE_REQUIRE_NO_SKIPS=1 (.ci/run sets it) the run fails when any test skipped for a
reason not in ALLOWED_SKIPS: a green CI means every test ran. The list stays short: a reason
belongs on it only when the skip is right on a machine CI can be given.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from typing import Any

import pytest

ALLOWED_SKIPS: dict[str, str] = {
    # pattern of the skip's reason: why skipping it is right even in CI
    r"one core: nothing to split": "a machine with one core has no second worker to split to",
}
"""Skips CI accepts, by a pattern of their reason, each with why."""

STRICT_SWITCH = "CHATGATE_REQUIRE_NO_SKIPS"


def strict() -> bool:
    """Whether a skip not in ALLOWED_SKIPS fails the run (CI)."""
    return os.environ.get(STRICT_SWITCH) == "1"


def allowed(reason: str) -> bool:
    return any(re.search(pattern, reason) for pattern in ALLOWED_SKIPS)


def skip_reason(report: pytest.TestReport) -> str:
    """The reason a skipped report gives: its longrepr is (path, line, "Skipped: reason"),
    a list once it has crossed from a worker."""
    longrepr = report.longrepr
    if isinstance(longrepr, (tuple, list)) and len(longrepr) == 3:
        text = str(longrepr[2])
    else:
        text = str(longrepr)
    return text.removeprefix("Skipped: ")


class SkipLedger:
    """The skips of one run, counted from the reports the summary's process receives;
    registered as a plugin there (never in an xdist worker, whose reports come back)."""

    def __init__(self) -> None:
        self.skips: list[tuple[str, str]] = []  # (node id, reason)

    def refused(self) -> list[tuple[str, str]]:
        return [(node, reason) for node, reason in self.skips if not allowed(reason)]

    def lines(self) -> list[str]:
        """One line per reason, most frequent first, with one test that skipped for it."""
        by_reason = Counter(reason for _, reason in self.skips)
        first: dict[str, str] = {}
        for node, reason in self.skips:
            first.setdefault(reason, node)
        return [f"{count} x {reason}  (e.g. {first[reason]})"
                for reason, count in by_reason.most_common()]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skips.append((report.nodeid, skip_reason(report)))

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """In strict mode a refused skip turns a passing run into a failing one."""
        if strict() and self.refused() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.skips:
            return
        refused = self.refused()
        title = f"{len(self.skips)} test(s) SKIPPED: they did NOT run"
        if strict() and refused:
            title += f"; {len(refused)} not allowed with {STRICT_SWITCH}=1: the run FAILS"
        elif refused:
            title += f" ({STRICT_SWITCH}=1, as in CI, makes this a failure)"
        terminalreporter.write_sep("!", title, red=bool(refused), yellow=not refused,
                                   bold=True)
        for line in self.lines():
            terminalreporter.write_line(line)


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # an xdist worker: its reports go to the controller
        config.pluginmanager.register(SkipLedger(), "chatgate-skip-ledger")
