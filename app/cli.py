"""What the operator scripts share: a database that is not migrated is one sentence on stderr
and exit 2, not a traceback about a missing table."""

from __future__ import annotations

import typer
from rich.console import Console

from app.store.migrations import NotMigrated


def run_cli(cli: typer.Typer, args: list[str] | None = None, prog_name: str | None = None,
            ) -> None:
    """Run a script's typer app (its `if __name__ == "__main__"` line)."""
    try:
        cli(args, prog_name=prog_name)
    except NotMigrated as error:
        Console(stderr=True).print(f"[red]error:[/red] {error}", highlight=False)
        raise SystemExit(2) from None
