"""The pure core beyond app.stream (tested in tests/stream/test_purity.py): importing it loads
no event loop, web framework, database or HTTP client, so it runs anywhere (scripts, replay)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

FORBIDDEN = ("asyncio", "starlette", "sqlalchemy", "httpx")
REPO = Path(__file__).resolve().parent.parent
PURE_MODULES = (
    "app.answer.answer",
    "app.answer.finish",
    "app.answer.call_usage",
    "app.core.clock",
    "app.context",
    "app.answer.estimate",
    "app.answer.pricing",
    "app.usage.figures",
    "app.answer.trace_replay",
    "app.core.cleaning",
    "app.core.synthetic",
    "app.repair",
    "app.followups.autonomy",
    "app.followups.triggers",
    "app.followups.recall_query",
)


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_module_loads_no_io_framework(module: str) -> None:
    probe = (
        f"import sys, importlib; importlib.import_module({module!r})\n"
        f"print(','.join(m for m in {FORBIDDEN!r} if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "", f"importing {module} loads {loaded}"
