"""Usage rollups: recompute them from the raw llm_calls rows, or check them against those rows.

    python scripts/usage.py backfill --from 2026-11-01 --to 2026-11-22 [--database-url URL]
    python scripts/usage.py verify [--day 2026-11-22] [--database-url URL]

backfill replaces the daily rollup rows of each UTC day in the range by the sums of that day's
llm_calls rows (one transaction a day; running it twice changes nothing). verify compares the
two for every day (or one), prints the differences and exits 1 on any; it also reports how many
assistant messages carry no token data at all (rows older than usage accounting), which are
unknown rather than zero. The rules live in app.usage.rollups.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.cli import resolve_database_url, run_cli
from app.store.migrations import migrated_database
from app.usage import rollups as usage_rollups
from app.usage.rollups import Mismatch, Verification

cli = typer.Typer(help="Chatgate usage rollups: backfill and verify.", no_args_is_help=True)
console = Console()


async def backfill(url: str | None, first: dt.date, last: dt.date) -> dict[dt.date, int]:
    """Recompute the rollups of [first, last]; returns the rollup rows each day now has."""
    async with migrated_database(resolve_database_url(url)) as db:
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("backfilling", total=(last - first).days + 1)
            return await usage_rollups.backfill(
                db, first, last,
                on_day=lambda done, total: progress.update(task, completed=done, total=total))


async def verify(url: str | None, day: dt.date | None) -> Verification:
    """Raw sums against rollups for one day, or every day with usage, from one snapshot."""
    async with migrated_database(resolve_database_url(url)) as db:
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("verifying", total=None)
            return await usage_rollups.verify(
                db, day,
                on_day=lambda done, total: progress.update(task, completed=done, total=total))


def _show(value: object) -> str:
    return "—" if value is None else str(value)


def mismatch_table(mismatches: list[Mismatch]) -> Table:
    table = Table("user", "day", "model", "field", "rollup", "raw (llm_calls)",
                  title="rollup differs from the raw rows")
    for m in mismatches:
        table.add_row(m.user_id, m.day.isoformat(), m.model, m.field, _show(m.rollup),
                      _show(m.raw))
    return table


def _parse_day(value: str, option: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        console.print(f"{option} must be a day as YYYY-MM-DD, got {value!r}", style="red")
        raise typer.Exit(2) from None


DbOption = typer.Option(None, "--database-url", help="defaults to CHATGATE_DATABASE_URL")


@cli.command("backfill")
def backfill_command(
    first: str = typer.Option(..., "--from", help="first UTC day, YYYY-MM-DD"),
    last: str = typer.Option(..., "--to", help="last UTC day (included), YYYY-MM-DD"),
    database_url: str | None = DbOption,
) -> None:
    """Recompute the daily rollups of a range of UTC days from the llm_calls rows."""
    first_day, last_day = _parse_day(first, "--from"), _parse_day(last, "--to")
    if first_day > last_day:
        console.print("--from must not be after --to", style="red")
        raise typer.Exit(2)
    written = asyncio.run(backfill(database_url, first_day, last_day))
    console.print(f"backfilled {len(written)} day(s) {first_day} .. {last_day}: "
                  f"{sum(written.values())} rollup row(s)", highlight=False)


@cli.command("verify")
def verify_command(
    day: str | None = typer.Option(None, "--day", help="one UTC day; default every day"),
    database_url: str | None = DbOption,
) -> None:
    """Compare the rollups with the raw llm_calls sums; exit 1 on any difference."""
    result = asyncio.run(verify(database_url, _parse_day(day, "--day") if day else None))
    console.print(f"checked {len(result.days)} day(s)", highlight=False)
    console.print(f"assistant messages without token data (unknown, not 0): "
                  f"{result.messages_without_tokens}", highlight=False)
    if result.mismatches:
        console.print(mismatch_table(result.mismatches))
        console.print(f"MISMATCH: {len(result.mismatches)} figure(s) differ; "
                      "`backfill` recomputes the rollups from the raw rows", style="bold red")
        raise typer.Exit(1)
    console.print("OK: rollups equal the raw sums", style="green")


if __name__ == "__main__":
    run_cli(cli)
