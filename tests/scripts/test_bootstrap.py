"""A first start of scripts/serve spends a minute or more making .venv and installing; it
said one line and then nothing for 86 s. Each step now says what it does and how long it
took, and an installed .venv says nothing. Run against a stand-in python3 and pip (the
real install is the minute this test must not spend), in a copy of the bootstrap."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.support.gateway import ROOT

#: A python3 whose `-m venv DIR` makes DIR/bin/python, a python that records each pip call.
FAKE_PYTHON3 = """#!/usr/bin/env bash
set -e
if [ "$1 $2" = "-m venv" ]; then
    mkdir -p "$3/bin"
    printf '#!/usr/bin/env bash\\nsleep 0.1\\necho "$*" >> "%s/pip-calls"\\n' "$PWD" \\
        > "$3/bin/python"
    chmod +x "$3/bin/python"
fi
"""
STEP_DONE = re.compile(r"^bootstrap: (.+): done in \d+\.\d s$")


def bootstrap(root: Path, env_path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", "source scripts/bootstrap.sh"], cwd=root,
                          env={"PATH": env_path, "HOME": str(root)}, capture_output=True,
                          text=True, timeout=60, check=False)


def test_a_cold_start_says_each_step_and_its_time_and_a_warm_one_nothing(
        tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "bootstrap.sh", root / "scripts" / "bootstrap.sh")
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (root / "requirements.lock").write_text("")
    fakes = tmp_path / "bin"
    fakes.mkdir()
    (fakes / "python3").write_text(FAKE_PYTHON3)
    (fakes / "python3").chmod(0o755)
    path = f"{fakes}:/usr/bin:/bin"

    cold = bootstrap(root, path)
    assert cold.returncode == 0, cold.stderr
    lines = cold.stderr.splitlines()
    done = [m.group(1) for line in lines if (m := STEP_DONE.match(line))]
    assert done == ["creating .venv (python3 -m venv)", "upgrading pip",
                    "installing the pinned dependencies (requirements.lock)",
                    "installing chatgate (runtime dependencies only) into .venv"]
    for step in done:  # each step is announced before it runs, then timed
        assert lines.index(f"bootstrap: {step}...") < lines.index(
            next(line for line in lines if line.startswith(f"bootstrap: {step}: done")))
    assert re.match(r"^bootstrap: ready in \d+\.\d s; the next start skips all this",
                    lines[-1])
    assert len((root / "pip-calls").read_text().splitlines()) == 3

    warm = bootstrap(root, path)
    assert (warm.returncode, warm.stderr) == (0, "")
