"""Replay a traced stream through the MarkerFilter, chunk by chunk (docs/debugging.md).

    chatgate replay --message-id ID [--database-url URL] [--out trace.json]
    chatgate replay --file trace.json
    chatgate replay export --message-id ID --out trace.json

Prints, for every raw upstream chunk, what the filter emitted and the warnings it raised
there, then whether the replay's text equals the stored content. A trace exists when the
gateway ran with CHATGATE_TRACE_STREAMS=errors (streams with a warning or not `complete`) or
`all`. `--out` (or `export`) writes the trace and the stored message to a JSON file that
`--file` replays anywhere, without the database.

Exit codes: 0 the replay reproduces the stored content; 1 it does not; 2 no such trace, or a
bad file or arguments.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from app.answer.trace_replay import (
    ReplayResult,
    ReplayStep,
    Trace,
    TraceFormatError,
    replay,
    trace_from_json,
    trace_to_json,
)
from app.cli import FLAG, RunConsole, resolve_database_url, run_cli
from app.config.catalog import ModelsFileError
from app.config.models_file import load_catalog
from app.config.settings import get_settings
from app.observe.redaction import SECRETS
from app.store.migrations import migrated_database
from app.stream import FilterWarning
from app.turn.rows import traces

cli = typer.Typer(help="Replay a traced stream through the MarkerFilter.", add_completion=False)
out = RunConsole()
err = RunConsole(stderr=True)

MessageOpt = Annotated[
    str | None, typer.Option("--message-id", help="Load this message's trace from the DB.")]
FileOpt = Annotated[Path | None, typer.Option("--file", help="Replay a trace file instead.")]
UrlOpt = Annotated[
    str | None, typer.Option("--database-url", help="Default: CHATGATE_DATABASE_URL.")]
OutOpt = Annotated[Path | None, typer.Option("--out", help="Also write the trace to this file.")]
JsonOpt = Annotated[bool, typer.Option("--json", **FLAG, help="Machine-readable result on stdout.")]
WarningsOnlyOpt = Annotated[
    bool, typer.Option("--warnings-only", **FLAG,
                       help="Only the chunks with warnings or divergence.")]


def fail(message: str) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(2)


async def fetch_trace(database_url: str | None, message_id: uuid.UUID) -> Trace | None:
    async with (migrated_database(resolve_database_url(database_url)) as db,
                db.transaction() as session):
        return await traces.load_trace(session, message_id)


def read_trace_file(path: Path) -> Trace:
    try:
        return trace_from_json(json.loads(path.read_text(encoding="utf-8")))
    except OSError as exc:
        raise fail(f"cannot read {path}: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise fail(f"{path} is not JSON: {exc}") from exc
    except TraceFormatError as exc:
        raise fail(f"{path}: {exc}") from exc


def get_trace(message_id: str | None, file: Path | None, database_url: str | None) -> Trace:
    if (message_id is None) == (file is None):
        raise fail("give exactly one of --message-id or --file")
    if file is not None:
        return read_trace_file(file)
    try:
        parsed = uuid.UUID(str(message_id))
    except ValueError as exc:
        raise fail(f"--message-id must be a UUID, got {message_id!r}") from exc
    trace = asyncio.run(fetch_trace(database_url, parsed))
    if trace is None:
        raise fail(f"no stream trace for message {parsed} (was trace_streams off, or the "
                   "stream clean with trace_streams=errors?)")
    return trace


def write_trace_file(trace: Trace, path: Path) -> None:
    """The trace as JSON, with the secrets this environment knows replaced: the gateway
    redacted the chunks, but the stored message is as the model wrote it."""
    with contextlib.suppress(ModelsFileError):
        settings = get_settings()
        SECRETS.know(*load_catalog(settings).secrets(settings))
    data = SECRETS.value(trace_to_json(trace))
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    err.print(f"trace written to {path}", highlight=False)


# -- output ---------------------------------------------------------------------------------


def warning_text(w: FilterWarning) -> str:
    return f"{w.kind} ({w.marker}, header in chunk {w.chunk_index}, chars {w.offset}-{w.end})"


def warning_json(w: FilterWarning) -> dict[str, Any]:
    return {"kind": w.kind, "marker": w.marker, "chunk_index": w.chunk_index,
            "offset": w.offset, "end": w.end}


def step_table(result: ReplayResult, warnings_only: bool) -> Table:
    table = Table(title="replay", show_lines=False)
    for name in ("chunk", "raw (repr)", "emitted (repr)", "warnings raised"):
        table.add_column(name, overflow="fold")
    for number, step in enumerate(result.steps):
        diverged = number == result.divergence
        if warnings_only and not step.warnings and not diverged:
            continue
        table.add_row(
            Text("close" if step.raw is None else str(step.index)),
            Text("" if step.raw is None else repr(step.raw)),
            Text(repr(step.emitted), style="red" if diverged else ""),
            Text("\n".join(warning_text(w) for w in step.warnings), style="yellow"),
        )
    return table


def describe_divergence(result: ReplayResult, trace: Trace) -> str:
    if result.divergence is None:
        return "the stored content is longer than the replay"
    if result.divergence >= len(result.steps):
        return (f"the stored content goes on after the replay ends: "
                f"{trace.stored_content[len(result.content):][:80]!r}")
    step: ReplayStep = result.steps[result.divergence]
    where = "close" if step.raw is None else f"chunk {step.index}"
    position = len("".join(s.emitted for s in result.steps[: result.divergence]))
    stored = trace.stored_content[position: position + max(len(step.emitted), 20)]
    return f"first difference at {where}: replay emitted {step.emitted!r}, stored has {stored!r}"


def print_report(trace: Trace, result: ReplayResult, warnings_only: bool) -> None:
    finish = trace.finish
    out.print(Text(
        f"message {trace.message_id} · status {trace.status} · model {trace.model} · "
        f"{len(trace.chunks)} chunks · filter closed: {trace.filter_closed} · "
        f"traced {trace.created_at}"))
    out.print(step_table(result, warnings_only))
    for step in result.steps:
        where = "close" if step.raw is None else f"chunk {step.index}"
        for w in step.warnings:
            out.print(Text(f"warning raised at {where}: {warning_text(w)}"))
    recorded = [e.get("kind") for e in trace.recorded_warnings]
    if recorded != [w.kind for w in result.warnings]:
        out.print(Text(f"note: the gateway recorded warnings {recorded}", style="yellow"))
    stored_meta, replay_meta = trace.stored_metadata or {}, result.metadata
    same_meta = "same as stored" if stored_meta == replay_meta else f"stored: {stored_meta}"
    out.print(Text(f"metadata: {replay_meta} ({same_meta})"))
    if "content" in finish and finish["content"] != trace.stored_content:
        out.print(Text("note: the stored message changed after the stream (repair run or "
                       "manual edit): the trace's finish content differs", style="yellow"))
    if finish.get("sanitized"):
        out.print(Text(f"note: the trace was sanitised on write: {finish['sanitized']}"))
    if finish.get("redacted"):
        out.print(Text(f"note: {finish['redacted']} chunk(s) held a secret, replaced by "
                       "[REDACTED] on write"))
    if result.reasoning or trace.stored_reasoning:
        same = result.reasoning == trace.stored_reasoning
        stored_note = "same as stored" if same else f"stored: {trace.stored_reasoning[:80]!r}"
        out.print(Text(f"reasoning ({len(trace.reasoning_chunks)} field deltas, format "
                       f"{trace.reasoning_format}, tag {trace.reasoning_tag}): "
                       f"{result.reasoning[:80]!r} ({stored_note})",
                       style="" if same else "bold red"))
    if result.tool_calls or trace.stored_tool_calls:
        same = list(result.tool_calls) == trace.stored_tool_calls
        for step in result.steps:
            where = "close" if step.raw is None else f"chunk {step.index}"
            for call in step.tool_calls:
                out.print(Text(f"tool call given out at {where}: {call.name}"
                               f"({call.arguments[:80]})"))
        out.print(Text(f"tool calls (format {trace.tool_format}, tag {trace.tool_tag}): "
                       f"{len(result.tool_calls)} "
                       f"({'same as given' if same else f'given: {trace.stored_tool_calls}'})",
                       style="" if same else "bold red"))
    if result.matches:
        out.print(Text("replay == stored content: yes", style="green"))
    else:
        out.print(Text(f"replay == stored content: NO ({describe_divergence(result, trace)})",
                       style="bold red"))


def report_json(trace: Trace, result: ReplayResult) -> dict[str, Any]:
    return {
        "message_id": trace.message_id, "status": trace.status, "model": trace.model,
        "filter_closed": trace.filter_closed, "matches": result.matches,
        "divergence": result.divergence, "content": result.content,
        "stored_content": trace.stored_content, "metadata": result.metadata,
        "stored_metadata": trace.stored_metadata,
        "reasoning": result.reasoning, "stored_reasoning": trace.stored_reasoning,
        "tool_calls": [list(call) for call in result.tool_calls],
        "stored_tool_calls": [list(call) for call in trace.stored_tool_calls],
        "warnings": [warning_json(w) for w in result.warnings],
        "recorded_warnings": trace.recorded_warnings,
        "steps": [{"index": s.index, "raw": s.raw, "emitted": s.emitted,
                   "reasoning": s.reasoning,
                   "tool_calls": [list(call) for call in s.tool_calls],
                   "warnings": [warning_json(w) for w in s.warnings]} for s in result.steps],
    }


# -- commands -------------------------------------------------------------------------------


@cli.command("replay")
def replay_command(
    message_id: MessageOpt = None, file: FileOpt = None, database_url: UrlOpt = None,
    out_file: OutOpt = None, as_json: JsonOpt = False, warnings_only: WarningsOnlyOpt = False,
) -> None:
    """Replay a trace and compare the result with the stored content (the default command)."""
    trace = get_trace(message_id, file, database_url)
    if out_file is not None:
        write_trace_file(trace, out_file)
    result = replay(trace)
    if as_json:
        sys.stdout.write(json.dumps(report_json(trace, result), ensure_ascii=False) + "\n")
    else:
        print_report(trace, result, warnings_only)
    raise typer.Exit(0 if result.matches else 1)


@cli.command("export")
def export_command(
    message_id: Annotated[str, typer.Option("--message-id", help="The traced message.")],
    out_file: Annotated[Path, typer.Option("--out", help="The trace file to write.")],
    database_url: UrlOpt = None,
) -> None:
    """Write a message's trace (and the stored message) to a JSON file, without replaying."""
    write_trace_file(get_trace(message_id, None, database_url), out_file)


def with_default_command(argv: list[str]) -> list[str]:
    """`replay` is the default: `replay --message-id ID` works without a command."""
    if not argv or argv[0] not in ("replay", "export", "--help", "-h"):
        return ["replay", *argv]
    return argv


def main(argv: list[str]) -> None:
    run_cli(cli, with_default_command(argv), prog_name="replay_stream.py")

