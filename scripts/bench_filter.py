"""Benchmark of MarkerFilter against a pass-through that only returns each chunk.

    .venv/bin/python scripts/bench_filter.py [--runs 5] [--split/--no-split]

Prints chunks/s and MB/s (10^6 UTF-8 bytes of model output per second), the median of
several runs, for a realistic ~200 KB markdown answer and for adversarial inputs, plus
the peak hold-back the filter reported. Targets (docs/markers.md): >= 1,000,000 chunks/s
for 4-character chunks of ordinary text, >= 100 MB/s in 4 KB chunks, and 1 MB fed one
character at a time costing at most 1.5x per character what 250 KB costs.

With `--split` (the default) each input also runs, in the same rounds, through the
ReasoningSplit an answer's content goes through (format `think`): the inputs start with no
`<think>`, so this is the plain-answer path every answer pays, and the table shows how much
slower it is than the bare filter, fastest run against fastest run (target: at most 10 %).
With `--tools` (the default) each input also runs through the split with the inline tool
call format `hermes` set (app.stream.tools); the inputs hold no `<tool_call>`, so this is
what a plain answer pays for the format, against the split without it (format `none`),
fastest run against fastest run (target: at most 5 %).

    .venv/bin/python scripts/bench_filter.py --tool-formats [--runs 41]

times that comparison alone, steadier on a shared machine: the plain markdown answer in 1 B,
4 B and 4 KB chunks through the split with the format `none` and `hermes`, in CPU time (what
other processes take of the wall clock is not counted), the two taking turns in every round
and each measurement long enough to dwarf the clock; it prints the median of each, their
ratio and the median of the rounds' own ratios.
"""

from __future__ import annotations

import functools
import json
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import typer
from rich.console import Console
from rich.table import Table

from app.stream import MarkerFilter, ReasoningSplit

app = typer.Typer(add_completion=False)


class PassThrough:
    """The floor: what feeding chunks costs when the filter does nothing."""

    def feed(self, chunk: str) -> str:
        return chunk

    def close(self) -> str:
        return ""


PROSE = (
    "the gateway streams each answer to the browser while the model is still writing it "
    "so a reader sees text appear at once and the stored message matches what was shown "
    "markers never reach the page because one filter decides what is visible"
)
WORDS = PROSE.split()


def markdown_answer(size: int, seed: int = 7) -> str:
    """A plausible long answer: prose, lists, code with `<`, `<!--` and `--`, metadata."""
    rng = random.Random(seed)
    parts: list[str] = []
    total = 0
    section = 0
    while total < size:
        section += 1
        block = [f"## Step {section}\n\n"]
        for _ in range(rng.randint(2, 4)):
            sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20)))
            block.append(sentence.capitalize() + ". ")
        block.append("\n\n")
        block.append("- use `a < b` when comparing\n- pass `--verbose` for details\n\n")
        block.append(
            "```html\n<!DOCTYPE html>\n<!-- page header -->\n<html>\n  <body>\n"
            f"    <p>{section} < {section + 1} -- and {section + 2} > 1</p>\n"
            "  </body>\n</html>\n```\n\n"
        )
        block.append(f"```bash\ngit log --oneline -n {section} | grep -v '<!--'\n```\n\n")
        text = "".join(block)
        parts.append(text)
        total += len(text)
    metadata = {"language": "en", "sources": ["https://example.org/a"], "awaiting": None}
    parts.append(f"\n<!-- METADATA: {json.dumps(metadata)} -->")
    return "".join(parts)


def metadata_body(size: int) -> str:
    items = [
        {"url": f"https://example.org/{i}", "title": f"Source number {i}"} for i in range(9999)
    ]
    body = json.dumps({"language": "en", "sources": items})
    body = body[: size - 200]
    body = body[: body.rfind("},") + 1] + "]}"
    return f"Answer with a big metadata block.\n<!-- METADATA: {body} -->"


def split(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


@dataclass
class Timing:
    seconds: float
    peak_held_back: int
    peak_buffered: int
    best: float = 0.0
    """The fastest run: what the split-vs-filter ratio compares (load from other processes
    on a shared machine only ever adds time, so the minimum is the steadiest figure)."""


Feeder = MarkerFilter | ReasoningSplit | PassThrough


def run(factory: Callable[[], Feeder], chunks: list[str]) -> Timing:
    f = factory()
    start = time.perf_counter()
    if isinstance(f, ReasoningSplit):
        for chunk in chunks:
            f.feeder.feed(chunk)  # as the answer feeds it (app.answer.answer)
    else:
        for chunk in chunks:
            f.feed(chunk)
    f.close()
    seconds = time.perf_counter() - start
    if isinstance(f, ReasoningSplit):
        f = f.content_filter
    if isinstance(f, MarkerFilter):
        return Timing(seconds, f.peak_held_back, f.peak_buffered)
    return Timing(seconds, 0, 0)


def median_of(timings: list[Timing]) -> Timing:
    return Timing(
        statistics.median(t.seconds for t in timings),
        timings[0].peak_held_back,
        timings[0].peak_buffered,
        min(t.seconds for t in timings),
    )


def medians(
    factories: list[Callable[[], Feeder]], inputs: list[list[str]], runs: int
) -> list[list[Timing]]:
    """Median per factory and input; the factories and inputs take turns in every round, so
    a burst of load from other processes on the machine hits them alike (this matters for
    the 1 MB / 250 KB ratio and for the split-vs-filter comparison)."""
    rounds = [
        [[run(factory, chunks) for chunks in inputs] for factory in factories]
        for _ in range(runs)
    ]
    return [
        [median_of([r[f][k] for r in rounds]) for k in range(len(inputs))]
        for f in range(len(factories))
    ]


@dataclass
class Case:
    name: str
    text: str
    chunk_size: int


def cases() -> list[Case]:
    answer = markdown_answer(200_000)
    lt = "<a" * 100_000
    open_runs = "<!-" * 66_667
    meta = metadata_body(60_000)
    dense = "<!--METADATA:{} x" * 12_000
    long_answer = markdown_answer(1_000_000, seed=8)
    quarter = long_answer[:250_000]
    return [
        Case("markdown 200 KB", answer, 4),
        Case("markdown 200 KB", answer, 4096),
        Case("every other char '<'", lt, 4),
        Case("every other char '<'", lt, 4096),
        Case("'<!-' repeated", open_runs, 4),
        Case("'<!-' repeated", open_runs, 4096),
        Case("60 KB METADATA body", meta, 4),
        Case("60 KB METADATA body", meta, 4096),
        Case("a block every 17 chars", dense, 4),
        Case("a block every 17 chars", dense, 4096),
        Case("markdown 250 KB", quarter, 1),
        Case("markdown 1 MB", long_answer, 1),
    ]


def cpu_seconds(factory: Callable[[], ReasoningSplit], chunks: list[str], passes: int) -> float:
    """CPU time of `passes` whole answers, fed as the answer feeds them."""
    start = time.process_time()
    for _ in range(passes):
        split_ = factory()
        feed = split_.feeder.feed
        for chunk in chunks:
            feed(chunk)
        split_.close()
    return time.process_time() - start


def compare_tool_formats(console: Console, runs: int) -> None:
    """None vs hermes on a plain answer: medians over interleaved rounds, in CPU time."""
    answer = markdown_answer(200_000)
    one_char = markdown_answer(1_000_000, seed=8)[:250_000]
    inputs = [("markdown 250 KB", one_char, 1, 1), ("markdown 200 KB", answer, 4, 1),
              ("markdown 200 KB", answer, 4096, 40)]
    formats: dict[str, Callable[[], ReasoningSplit]] = {
        "none": ReasoningSplit, "hermes": functools.partial(ReasoningSplit, tool_format="hermes")}
    table = Table(title=f"plain answer, tool format none vs hermes (CPU time, {runs} rounds)")
    for column in ("input", "chunk", "passes", "none ms", "hermes ms", "hermes vs none",
                   "median of round ratios"):
        table.add_column(column, justify="left" if column == "input" else "right",
                         no_wrap=column == "input")
    for name, text, size, passes in inputs:
        chunks = split(text, size)
        seconds: dict[str, list[float]] = {key: [] for key in formats}
        for round_ in range(runs):
            order = list(formats) if round_ % 2 == 0 else list(reversed(formats))
            for key in order:
                seconds[key].append(cpu_seconds(formats[key], chunks, passes))
        none, hermes = (statistics.median(seconds[key]) for key in formats)
        ratios = [h / n for h, n in zip(seconds["hermes"], seconds["none"], strict=True)]
        table.add_row(name, f"{size} B" if size < 4096 else "4 KB", str(passes),
                      f"{none * 1e3:.2f}", f"{hermes * 1e3:.2f}",
                      f"{(hermes / none - 1) * 100:+.1f} %",
                      f"{(statistics.median(ratios) - 1) * 100:+.1f} %")
    console.print(table)


@app.command()
def main(
    runs: int = typer.Option(5, help="runs per measurement; the median is shown"),
    with_split: bool = typer.Option(
        True, "--split/--no-split", help="also time the reasoning split's plain-answer path"),
    with_tools: bool = typer.Option(
        True, "--tools/--no-tools",
        help="also time the split with the tool format `hermes` (needs --split)"),
    tool_formats: bool = typer.Option(
        False, "--tool-formats",
        help="only compare a plain answer with the tool format none and hermes, CPU time"),
) -> None:
    console = Console(width=230)
    if tool_formats:
        compare_tool_formats(console, runs)
        return
    with_tools = with_tools and with_split
    table = Table(title=f"MarkerFilter vs pass-through (median of {runs} runs)")
    for column in (
        "input",
        "chunk",
        "chunks",
        "filter chunks/s",
        "filter MB/s",
        "pass chunks/s",
        "pass MB/s",
        "peak held",
        "peak buffered",
        *(("split chunks/s", "split vs filter (best)") if with_split else ()),
        *(("hermes chunks/s", "hermes vs split (best)") if with_tools else ()),
    ):
        table.add_column(column, justify="left" if column == "input" else "right",
                         no_wrap=column == "input")
    per_char: dict[str, float] = {}
    all_cases = cases()
    groups = [[c] for c in all_cases if c.chunk_size != 1]
    groups.append([c for c in all_cases if c.chunk_size == 1])
    for group in groups:
        inputs = [split(case.text, case.chunk_size) for case in group]
        factories: list[Callable[[], Feeder]] = [MarkerFilter, PassThrough]
        if with_split:
            factories.append(ReasoningSplit)
        if with_tools:
            factories.append(functools.partial(ReasoningSplit, tool_format="hermes"))
        filtered, floors, *rest = medians(factories, inputs, runs)
        splits = rest[0] if rest else floors
        hermes = rest[1] if len(rest) > 1 else floors
        for case, chunks, timing, floor, through_split, through_hermes in zip(
            group, inputs, filtered, floors, splits, hermes, strict=True
        ):
            megabytes = len(case.text.encode()) / 1e6
            if case.chunk_size == 1:
                per_char[case.name] = timing.seconds / len(case.text)
            table.add_row(
                case.name,
                f"{case.chunk_size} B" if case.chunk_size < 4096 else "4 KB",
                f"{len(chunks):,}",
                f"{len(chunks) / timing.seconds:,.0f}",
                f"{megabytes / timing.seconds:,.1f}",
                f"{len(chunks) / floor.seconds:,.0f}",
                f"{megabytes / floor.seconds:,.1f}",
                f"{timing.peak_held_back:,}",
                f"{timing.peak_buffered:,}",
                *(
                    (
                        f"{len(chunks) / through_split.seconds:,.0f}",
                        f"{(through_split.best / timing.best - 1) * 100:+.1f} %",
                    )
                    if with_split
                    else ()
                ),
                *(
                    (
                        f"{len(chunks) / through_hermes.seconds:,.0f}",
                        f"{(through_hermes.best / through_split.best - 1) * 100:+.1f} %",
                    )
                    if with_tools
                    else ()
                ),
            )
    console.print(table)
    ratio = per_char["markdown 1 MB"] / per_char["markdown 250 KB"]
    console.print(
        f"per-character cost, one character at a time: 1 MB "
        f"{per_char['markdown 1 MB'] * 1e9:.0f} ns, 250 KB "
        f"{per_char['markdown 250 KB'] * 1e9:.0f} ns, ratio {ratio:.2f} (target <= 1.5)"
    )


if __name__ == "__main__":
    app()
