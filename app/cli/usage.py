"""Usage of every user at a terminal, and the daily rollups: recomputed from the raw llm_calls
rows, or checked against those rows.

    chatgate usage report [--from 2026-11-01] [--to 2026-11-22] [--by day|user|model|stage]
                          [--json | --csv] [--database-url URL]
    chatgate usage backfill --from 2026-11-01 --to 2026-11-22 [--database-url URL]
    chatgate usage verify [--day 2026-11-22] [--database-url URL]

report prints what the admin dashboard (/admin) shows: the range's usage (by default, as the
dashboard's, the 30 UTC days up to today) grouped by day, user, model or stage (a rich table
by default, with the totals and the refusals by reason; piped, as wide as its values), as the
JSON of GET /api/admin/usage/report with every row (--json), or as its CSV (--csv).

backfill replaces the daily rollup rows of each UTC day in the range by the sums of that day's
llm_calls rows (one transaction a day; running it twice changes nothing). verify compares the
two for every day (or one), prints the differences and exits 1 on any; it also reports how many
assistant messages carry no token data at all (rows older than usage accounting), which are
unknown rather than zero. The rules live in app.usage.rollups.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import sys
from typing import Any

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from app.cli import FLAG, RunConsole, resolve_database_url
from app.config.catalog import ModelsFileError
from app.config.models_file import load_catalog
from app.config.settings import get_settings
from app.core.clock import utcnow
from app.store.migrations import migrated_database
from app.usage import admin_reports
from app.usage import rollups as usage_rollups
from app.usage.admin_reports import AdminUsageQuery
from app.usage.reports import InvalidUsageQuery, UsageQuery, date_range
from app.usage.rollups import Mismatch, Verification

cli = typer.Typer(help="Chatgate usage: report, and the rollups' backfill and verify.",
                  no_args_is_help=True)
console = RunConsole()


async def backfill(url: str | None, first: dt.date, last: dt.date) -> dict[dt.date, int]:
    """Recompute the rollups of [first, last]; returns the rollup rows each day now has."""
    async with migrated_database(resolve_database_url(url)) as db:
        with Progress(console=console.now(), transient=True) as progress:
            task = progress.add_task("backfilling", total=(last - first).days + 1)
            return await usage_rollups.backfill(
                db, first, last,
                on_day=lambda done, total: progress.update(task, completed=done, total=total))


async def verify(url: str | None, day: dt.date | None) -> Verification:
    """Raw sums against rollups for one day, or every day with usage, from one snapshot."""
    async with migrated_database(resolve_database_url(url)) as db:
        with Progress(console=console.now(), transient=True) as progress:
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
REPORT_BY = ("day", "user", "model", "stage")


async def report(url: str | None, query: AdminUsageQuery) -> tuple[dict[str, Any], dict[str, Any]]:
    """The usage answer (every row) and the refusals answer of the dashboard's API."""
    async with migrated_database(resolve_database_url(url)) as db:
        return (await admin_reports.usage_report(db, query),
                await admin_reports.refusal_report(db, query.start, query.end))


def _cost(value: float | None, unpriced: int) -> str:
    shown = "unknown" if value is None else f"{value:.6f}"
    return f"{shown} (+{unpriced} unpriced)" if unpriced else shown


def usage_table(usage: dict[str, Any]) -> Table:
    key = admin_reports.KEY_FIELDS[usage["group_by"][0]]
    # reasoning tokens when the gateway records them (part of the completion tokens)
    tokens = [name for name in ("total_tokens", "prompt_tokens", "completion_tokens",
                                "reasoning_tokens") if name in usage["totals"]]
    table = Table(key, *(name.removesuffix("_tokens").replace("total", "tokens")
                         for name in tokens), "cost (USD)", "calls", "messages",
                  title=f"usage {usage['start']} .. {usage['end']} by {usage['group_by'][0]}")
    for column in table.columns[1:]:
        column.justify = "right"

    def add(name: str, row: dict[str, Any], **style: Any) -> None:
        table.add_row(name, *(f"{row[t]:,}" for t in tokens),
                      _cost(row["cost_usd"], row["unpriced_call_count"]),
                      f"{row['llm_call_count']:,}", _show(row["message_count"]), **style)

    for row in usage["rows"]:
        add(str(row[key]), row)
    table.add_section()
    add("total", usage["totals"], style="bold")
    return table


def refusals_table(refusals: dict[str, Any]) -> Table:
    table = Table("reason", "refusals", title="refused turn requests")
    table.columns[1].justify = "right"
    for reason, count in refusals["totals"].items():
        table.add_row(reason, f"{count:,}")
    table.add_section()
    table.add_row("total", f"{refusals['total']:,}", style="bold")
    return table


def _model_names() -> tuple[tuple[str, str], ...]:
    """The configured catalog's names of upstream ids (none when it cannot be read: the
    report then shows the ids, as the rows store them)."""
    try:
        return admin_reports.model_names(
            load_catalog(get_settings(), place_demo=False).catalog.models)
    except (ModelsFileError, ValueError):
        return ()


@cli.command("report")
def report_command(
    first: str | None = typer.Option(
        None, "--from", help="first UTC day, YYYY-MM-DD (default: 30 days up to --to)"),
    last: str | None = typer.Option(None, "--to",
                                    help="last UTC day (included), YYYY-MM-DD (default: today)"),
    by: str = typer.Option("day", "--by", help="day, user, model or stage"),
    as_json: bool = typer.Option(False, "--json", **FLAG, help="the API's JSON, every row"),
    as_csv: bool = typer.Option(False, "--csv", **FLAG, help="the API's CSV"),
    database_url: str | None = DbOption,
) -> None:
    """Every user's usage of a range of UTC days, as the admin dashboard shows it."""
    if by not in REPORT_BY:
        console.print(f"--by must be one of {', '.join(REPORT_BY)}, not {by!r}", style="red")
        raise typer.Exit(2)
    if as_json and as_csv:
        console.print("--json and --csv exclude each other", style="red")
        raise typer.Exit(2)
    try:
        # the dashboard's own rule: the 30 days up to today unless a day is given
        start, end = date_range(UsageQuery(_parse_day(first, "--from") if first else None,
                                           _parse_day(last, "--to") if last else None),
                                utcnow().date())
        query = AdminUsageQuery(start, end, admin_reports.group_keys(by), limit=None,
                                model_names=_model_names())
        usage, refusals = asyncio.run(report(database_url, query))
    except InvalidUsageQuery as exc:
        console.print(exc.message, style="red")
        raise typer.Exit(2) from None
    if as_json:
        sys.stdout.write(json.dumps(usage, indent=2) + "\n")
    elif as_csv:
        sys.stdout.write(admin_reports.usage_csv(usage))
    else:
        shown = report_console()
        shown.print(usage_table(usage))
        shown.print(refusals_table(refusals))


#: How wide a report may be where no terminal says (a pipe, a file): wide enough that no
#: column is ever cut; the tables are as wide as their values, no wider.
PIPE_WIDTH = 1000


def report_console() -> Console:
    """The terminal's width at a terminal (or COLUMNS'); piped, the tables' own width: a
    report written to a file or read by `less` or `grep` keeps every value whole instead of
    wrapping them into 80 columns."""
    if "COLUMNS" in os.environ or console.is_terminal:
        return console.now()
    return Console(width=PIPE_WIDTH)


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

