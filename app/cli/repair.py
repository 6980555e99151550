"""Find and fix messages stored by older, buggy gateways (docs/repair.md).

    chatgate repair scan [--check] [--json]        # read only
    chatgate repair fix [--apply] [--json]         # dry run unless --apply
    chatgate repair rollback RUN_ID [--json]       # undo one --apply exactly
    chatgate repair runs                           # list repair runs

Filters for scan/fix: --thread UUID, --user ID, --since / --before ISO-DATETIME (naive =
UTC); --batch-size N (default 500); --database-url URL (default: the gateway's settings).
--reasoning-format think|think-prefilled (default none: off) [--reasoning-tag think] also
moves the leading thinking block of answers stored before the reasoning split into their
reasoning (rule reasoning_split; rows with no reasoning only).
The flag spelling works too: `chatgate repair --check`, `--apply`,
`--rollback RUN_ID` (same meanings). Exit codes: 0 ok; 1 `--check` found corrupt rows;
2 bad arguments or unknown run id.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from app.cli import FLAG, RunConsole, resolve_database_url
from app.config.settings import REASONING_TAG
from app.repair import (
    FIX_RULES,
    NOTICE_RULES,
    RepairReport,
    Resplit,
    RollbackReport,
    ScanFilter,
)
from app.repair import service as repair_runs
from app.repair.repository import RunSummary
from app.store.migrations import migrated_database
from app.stream import REASONING_FORMATS, TOOL_FORMATS, ReasoningFormat

cli = typer.Typer(
    help="Find, fix and roll back corrupted stored messages.", add_completion=False,
)
out = RunConsole()
err = RunConsole(stderr=True)

ThreadOpt = Annotated[uuid.UUID | None, typer.Option("--thread", help="Only this thread.")]
UserOpt = Annotated[str | None, typer.Option("--user", help="Only this user's messages.")]
SinceOpt = Annotated[
    str | None, typer.Option("--since", help="Only messages created at/after (ISO; naive=UTC).")
]
BeforeOpt = Annotated[
    str | None, typer.Option("--before", help="Only messages created before (ISO; naive=UTC).")
]
FormatOpt = Annotated[str, typer.Option(
    "--reasoning-format", metavar="think|think-prefilled|none",
    help="Also move a leading thinking block stored as text (rows from before the reasoning "
         "split, with no reasoning) into the reasoning; the gateway's "
         "CHATGATE_REASONING_FORMAT. Default none: off.")]
TagOpt = Annotated[str, typer.Option(
    "--reasoning-tag", help="The thinking tag's name (CHATGATE_REASONING_TAG).")]
ToolFormatOpt = Annotated[str, typer.Option(
    "--tool-format", metavar="none|hermes",
    help="Also move inline tool call blocks stored as text (rows from before the tool format, "
         "with no tool_calls) into the row's tool calls; the gateway's CHATGATE_TOOL_FORMAT. "
         "Default none: off.")]
ToolTagOpt = Annotated[str, typer.Option(
    "--tool-tag", help="The tool call tag's name (CHATGATE_TOOL_TAG).")]
JsonOpt = Annotated[bool, typer.Option("--json", **FLAG, help="Machine-readable report on stdout.")]
UrlOpt = Annotated[
    str | None, typer.Option("--database-url", help="Default: CHATGATE_DATABASE_URL.")
]
BatchOpt = Annotated[int, typer.Option("--batch-size", min=1, help="Rows per batch.")]
SamplesOpt = Annotated[int, typer.Option("--samples", min=0, help="Before/after diffs shown.")]
CheckOpt = Annotated[bool, typer.Option("--check", **FLAG, help="Exit 1 when any row is corrupt.")]
ApplyOpt = Annotated[
    bool, typer.Option("--apply", **FLAG, help="Write the fixes (default: dry run).")]


def parse_since(value: str | None, option: str = "--since") -> dt.datetime | None:
    """An ISO date or datetime; without a zone it is UTC (the store keeps UTC)."""
    if value is None:
        return None
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError as error:
        raise typer.BadParameter(f"not an ISO date/datetime: {value!r}", param_hint=option) \
            from error
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def parse_resplit(reasoning_format: str, tag: str, tool_format: str = "none",
                  tool_tag: str = "tool_call") -> Resplit | None:
    """The re-split asked for, None when both formats are `none` (today's repairs only)."""
    if reasoning_format not in REASONING_FORMATS:
        raise typer.BadParameter(
            f"{reasoning_format!r} is not one of {', '.join(REASONING_FORMATS)}",
            param_hint="--reasoning-format")
    if not REASONING_TAG.fullmatch(tag):
        raise typer.BadParameter(f"{tag!r} is not a tag name (letters, digits, - and _)",
                                 param_hint="--reasoning-tag")
    if tool_format not in TOOL_FORMATS:
        raise typer.BadParameter(f"{tool_format!r} is not one of {', '.join(TOOL_FORMATS)}",
                                 param_hint="--tool-format")
    if not REASONING_TAG.fullmatch(tool_tag):
        raise typer.BadParameter(f"{tool_tag!r} is not a tag name (letters, digits, - and _)",
                                 param_hint="--tool-tag")
    if reasoning_format == "none" and tool_format == "none":
        return None
    fmt: ReasoningFormat = ("none" if reasoning_format == "none" else
                            "think" if reasoning_format == "think" else "think-prefilled")
    return Resplit(fmt, tag, "hermes" if tool_format == "hermes" else "none", tool_tag)


@contextmanager
def _progress(total: int, label: str, enabled: bool) -> Iterator[repair_runs.Progress | None]:
    if not enabled:
        yield None
        return
    columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err.now(), transient=False) as progress:
        task = progress.add_task(label, total=total)
        yield lambda n: progress.advance(task, n)


async def run_repairs(
    url: str | None, flt: ScanFilter, *, apply: bool, batch_size: int = 500,
    samples: int = 5, show_progress: bool = False, resplit: Resplit | None = None,
) -> RepairReport:
    """Scan (or apply) with a progress bar over the candidate rows."""
    async with migrated_database(resolve_database_url(url)) as db:
        _, candidates = await repair_runs.count_for_progress(db, flt, resplit)
        label = "repairing" if apply else "scanning"
        with _progress(candidates, label, show_progress) as on_batch:
            if apply:
                return await repair_runs.apply_repairs(
                    db, flt, batch_size=batch_size, on_batch=on_batch, max_samples=samples,
                    resplit=resplit)
            return await repair_runs.scan_messages(
                db, flt, batch_size=batch_size, on_batch=on_batch, max_samples=samples,
                resplit=resplit)


async def run_rollback(url: str | None, run_id: str) -> RollbackReport:
    async with migrated_database(resolve_database_url(url)) as db:
        return await repair_runs.rollback_run(db, run_id)


async def run_list(url: str | None) -> list[RunSummary]:
    async with migrated_database(resolve_database_url(url)) as db:
        return await repair_runs.list_runs(db)


# ------------------------------------------------------------------------- rendering


def _rule_table(report: RepairReport) -> Table:
    table = Table(title="Findings by rule")
    table.add_column("rule")
    table.add_column("kind")
    table.add_column("rows", justify="right")
    for rule in FIX_RULES:
        table.add_row(rule, "fix", str(report.by_rule.get(rule, 0)))
    for rule in NOTICE_RULES:
        table.add_row(rule, "notice (left as is)", str(report.notices.get(rule, 0)))
    return table


def _sample_table(report: RepairReport) -> Table:
    table = Table(title="Before / after (a few samples)", show_lines=True)
    for column in ("message", "rule", "before", "after"):
        table.add_column(column, overflow="fold")
    for s in report.samples:
        moved = "" if s.reasoning_after is None else f"\nreasoning: {s.reasoning_after}"
        table.add_row(
            s.message_id[:8], s.rule, f"{s.content_before}\n{s.metadata_before}",
            f"{s.content_after}\n{s.metadata_after}{moved}",
        )
    return table


def render_report(report: RepairReport) -> None:
    out.print(_rule_table(report))
    if report.samples:
        out.print(_sample_table(report))
    verb = "repaired" if report.mode == "apply" else "to repair"
    out.print(
        f"{report.total} messages, {report.scanned} candidates read in {report.batches} "
        f"batches; {report.corrupt} corrupt ({verb}: "
        f"{report.repaired if report.mode == 'apply' else report.corrupt}), "
        f"{sum(report.notices.values())} notices; {report.seconds:.2f} s"
    )
    if report.mode == "apply" and report.run_id:
        out.print(f"run id: [bold]{report.run_id}[/bold]  "
                  f"(undo: chatgate repair rollback {report.run_id})", soft_wrap=True)
    elif report.corrupt:
        out.print("dry run: nothing written; `fix --apply` writes these fixes")


def render_rollback(report: RollbackReport) -> None:
    out.print(
        f"run {report.run_id}: {report.restored} restored, {report.already_rolled_back} already "
        f"rolled back, {len(report.conflicts)} changed since the repair (left as they are); "
        f"{report.seconds:.2f} s"
    )
    for message_id in report.conflicts[:20]:
        out.print(f"  conflict: {message_id}")


def _emit_json(document: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")


# ------------------------------------------------------------------------- commands


def _scan_or_fix(
    *, apply: bool, check: bool, as_json: bool, url: str | None, thread: uuid.UUID | None,
    user: str | None, since: str | None, batch_size: int, samples: int,
    before: str | None = None, reasoning_format: str = "none", reasoning_tag: str = "think",
    tool_format: str = "none", tool_tag: str = "tool_call",
) -> None:
    flt = ScanFilter(thread_id=thread, user_id=user, since=parse_since(since),
                     before=parse_since(before, "--before"))
    resplit = parse_resplit(reasoning_format, reasoning_tag, tool_format, tool_tag)
    report = asyncio.run(run_repairs(
        url, flt, apply=apply, batch_size=batch_size, samples=samples,
        show_progress=not as_json and err.is_terminal, resplit=resplit,
    ))
    if as_json:
        _emit_json(report.to_json())
    else:
        render_report(report)
    if check and report.corrupt and not apply:
        raise typer.Exit(1)


def _rollback(run_id: str, *, as_json: bool, url: str | None) -> None:
    try:
        report = asyncio.run(run_rollback(url, run_id))
    except repair_runs.UnknownRun as error:
        err.print(f"[red]{error}[/red]")
        raise typer.Exit(2) from error
    if as_json:
        _emit_json(report.to_json())
    else:
        render_rollback(report)


@cli.command()
def scan(
    check: CheckOpt = False, as_json: JsonOpt = False, database_url: UrlOpt = None,
    thread: ThreadOpt = None, user: UserOpt = None, since: SinceOpt = None,
    batch_size: BatchOpt = repair_runs.DEFAULT_BATCH_SIZE, samples: SamplesOpt = 5,
    before: BeforeOpt = None, reasoning_format: FormatOpt = "none",
    reasoning_tag: TagOpt = "think", tool_format: ToolFormatOpt = "none",
    tool_tag: ToolTagOpt = "tool_call",
) -> None:
    """Report corrupt rows by rule, with a few before/after diffs. Writes nothing."""
    _scan_or_fix(apply=False, check=check, as_json=as_json, url=database_url, thread=thread,
                 user=user, since=since, batch_size=batch_size, samples=samples,
                 before=before, reasoning_format=reasoning_format,
                 reasoning_tag=reasoning_tag, tool_format=tool_format, tool_tag=tool_tag)


@cli.command()
def fix(
    apply: ApplyOpt = False, as_json: JsonOpt = False, database_url: UrlOpt = None,
    thread: ThreadOpt = None, user: UserOpt = None, since: SinceOpt = None,
    batch_size: BatchOpt = repair_runs.DEFAULT_BATCH_SIZE, samples: SamplesOpt = 5,
    before: BeforeOpt = None, reasoning_format: FormatOpt = "none",
    reasoning_tag: TagOpt = "think", tool_format: ToolFormatOpt = "none",
    tool_tag: ToolTagOpt = "tool_call",
) -> None:
    """Dry run by default; --apply writes per batch and prints the run id."""
    _scan_or_fix(apply=apply, check=False, as_json=as_json, url=database_url, thread=thread,
                 user=user, since=since, batch_size=batch_size, samples=samples,
                 before=before, reasoning_format=reasoning_format,
                 reasoning_tag=reasoning_tag, tool_format=tool_format, tool_tag=tool_tag)


@cli.command()
def rollback(
    run_id: Annotated[str, typer.Argument(help="The run id printed by fix --apply.")],
    as_json: JsonOpt = False, database_url: UrlOpt = None,
) -> None:
    """Restore every message of one run exactly as it was before the repair."""
    _rollback(run_id, as_json=as_json, url=database_url)


@cli.command()
def runs(as_json: JsonOpt = False, database_url: UrlOpt = None) -> None:
    """List repair runs, newest first."""
    found = asyncio.run(run_list(database_url))
    if as_json:
        _emit_json({"runs": [
            {"run_id": run.run_id, "messages": run.messages, "rolled_back": run.rolled_back,
             "repaired_at": str(run.repaired_at)} for run in found]})
        return
    table = Table(title="Repair runs")
    table.add_column("run id", no_wrap=True)
    for column in ("messages", "rolled back", "repaired at"):
        table.add_column(column)
    for run in found:
        table.add_row(run.run_id, str(run.messages), str(run.rolled_back), str(run.repaired_at))
    out.print(table)


def _refuse_options_before_command(ctx: typer.Context) -> None:
    """`--user alice fix --apply` must not repair every user's rows: an option given before
    a command would be silently dropped, so it is an error (exit 2) instead."""
    given = sorted(
        param.opts[0] for param in ctx.command.params
        if param.name in ctx.params and ctx.params[param.name] != param.default
    )
    if given:
        raise typer.BadParameter(
            f"{', '.join(given)} given before the command {ctx.invoked_subcommand!r}: put "
            "options after the command, or use the flag form without a command"
        )


@cli.callback(invoke_without_command=True)
def main(
    ctx: typer.Context,
    check: CheckOpt = False,
    apply: ApplyOpt = False,
    rollback_run: Annotated[
        str | None, typer.Option("--rollback", metavar="RUN_ID", help="Same as `rollback`.")
    ] = None,
    as_json: JsonOpt = False, database_url: UrlOpt = None,
    thread: ThreadOpt = None, user: UserOpt = None, since: SinceOpt = None,
    batch_size: BatchOpt = repair_runs.DEFAULT_BATCH_SIZE, samples: SamplesOpt = 5,
    before: BeforeOpt = None, reasoning_format: FormatOpt = "none",
    reasoning_tag: TagOpt = "think", tool_format: ToolFormatOpt = "none",
    tool_tag: ToolTagOpt = "tool_call",
) -> None:
    """Without a command: the flag form (--check, --apply, --rollback RUN_ID);
    with none of those, a dry run."""
    if ctx.invoked_subcommand is not None:
        _refuse_options_before_command(ctx)
        return
    if sum((check, apply, rollback_run is not None)) > 1:
        raise typer.BadParameter("use one of --check, --apply, --rollback")
    if rollback_run is not None:
        _rollback(rollback_run, as_json=as_json, url=database_url)
        return
    _scan_or_fix(apply=apply, check=check, as_json=as_json, url=database_url, thread=thread,
                 user=user, since=since, batch_size=batch_size, samples=samples,
                 before=before, reasoning_format=reasoning_format,
                 reasoning_tag=reasoning_tag, tool_format=tool_format, tool_tag=tool_tag)

