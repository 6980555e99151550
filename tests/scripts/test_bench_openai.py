"""scripts/bench_openai.py runs as documented and prints its three surfaces side by side (the
figures themselves are never asserted). It runs in this process (tests/support/scripts.py), the
upstream and the gateway it starts in theirs."""

from __future__ import annotations

import re

from tests.scripts.test_bench_scripts import bench_output


def test_bench_openai_prints_every_surface_at_every_level() -> None:
    out = bench_output("bench_openai.py", "--turns", "4", "--tokens", "5",
                      "--concurrency", "1,2", "--max-seconds", "120")
    rows = re.findall(r"^│\s+(\d+) │\s+(upstream|native|/v1) │(?:\s+-?[\d.]+ │){3}\s+(\d+) │$",
                      out, re.MULTILINE)
    assert rows == [(level, surface, "0") for level in ("1", "2")
                    for surface in ("upstream", "native", "/v1")], out
