"""What the operator scripts share: which database they work on (--database-url, else the
gateway's own setting), and a database that cannot be reached or is not migrated is one
sentence on stderr and exit 2, not a traceback about a refused connection or a missing
table."""

from __future__ import annotations

import typer
from rich.console import Console

from app.settings import get_settings
from app.store.errors import DatabaseUnavailable
from app.store.migrations import NotMigrated


def resolve_database_url(given: str | None) -> str:
    """The --database-url given, else the gateway's (CHATGATE_DATABASE_URL / DATABASE_URL,
    default SQLite under ./var). The store never reads settings itself: every entry point
    decides which database it opens, and for the scripts it is decided here, once."""
    return given if given is not None else get_settings().database_url


def run_cli(cli: typer.Typer, args: list[str] | None = None, prog_name: str | None = None,
            ) -> None:
    """Run a script's typer app (its `if __name__ == "__main__"` line)."""
    try:
        cli(args, prog_name=prog_name)
    except (NotMigrated, DatabaseUnavailable) as error:
        Console(stderr=True).print(f"[red]error:[/red] {error}", highlight=False)
        raise SystemExit(2) from None
