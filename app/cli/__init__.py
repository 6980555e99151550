"""The operator's commands (`chatgate keys|usage|repair|replay|serve|migrate`, app.cli.command;
the old `scripts/*.py` run the same code) and what they share: which database they work on
(--database-url, else the gateway's own setting), and a wrong setting, or a database that
cannot be reached, does not exist or is not migrated, is one sentence on stderr and exit 2
(app.gateway.startup), not a traceback about a refused connection or a missing table."""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console

from app.config.database_urls import database_url_problem, redacted
from app.config.settings import get_settings
from app.gateway.startup import ConfigError, checked_settings, one_sentence_on_error

#: What every flag of the operator scripts passes to typer.Option: typer's help shows a bool
#: option's type as `<bool>`, which reads as if the flag took a value (`--admin true`).
FLAG: dict[str, Any] = {"metavar": "", "show_default": False}


class RunConsole:
    """A rich console made anew for each use: what it writes to (stdout or stderr) and how
    wide it is (COLUMNS, a terminal or a pipe) are those of the command running now, not of
    the first command of a process that runs several (the tests run them in one)."""

    def __init__(self, *, stderr: bool = False) -> None:
        self._stderr = stderr

    def now(self) -> Console:
        """The console as it is for this command (one to hand to a Progress)."""
        return Console(stderr=self._stderr)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.now(), name)


def resolve_database_url(given: str | None) -> str:
    """The --database-url given, else the gateway's (CHATGATE_DATABASE_URL / DATABASE_URL,
    default SQLite under ./var). The store never reads settings itself: every entry point
    decides which database it opens, and for the scripts it is decided here, once. A given
    URL is held to the setting's rule."""
    if given is None:
        return get_settings().database_url
    problem = database_url_problem(given)
    if problem is not None:
        raise ConfigError(f"--database-url must be {problem}, not {redacted(given)!r}")
    return given


def run_cli(cli: typer.Typer, args: list[str] | None = None, prog_name: str | None = None,
            ) -> None:
    """Run a script's typer app (its `if __name__ == "__main__"` line), the settings checked
    first: a wrong one is refused before any command runs, as scripts/serve refuses it."""
    checked_settings()
    with one_sentence_on_error():
        cli(args, prog_name=prog_name)
