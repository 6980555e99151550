"""app.stream is the pure core: no event loop, web framework, database or HTTP client."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import app.stream

FORBIDDEN = ("asyncio", "starlette", "sqlalchemy", "httpx")
PACKAGE = Path(app.stream.__file__).parent
REPO = PACKAGE.parent.parent


def test_importing_app_stream_loads_no_io_framework() -> None:
    probe = f"import sys, app.stream\nprint(','.join(m for m in {FORBIDDEN!r} if m in sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == ""


def test_no_module_of_app_stream_imports_them() -> None:
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"
