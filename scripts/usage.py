#!/usr/bin/env bash
''''exec "$(dirname "$0")/venv_python" "$0" "$@" # '''

# usage reports, the daily rollups' backfill and verify: `chatgate usage` (app/cli/usage.py), run
# from this script's old path. The first line, a shell command to the shell and a string to
# Python, runs this file with the checkout's .venv (scripts/venv_python), so
# `scripts/usage.py ...` works as `.venv/bin/python scripts/usage.py ...` does.

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.cli import run_cli
from app.cli.usage import cli

if __name__ == "__main__":
    run_cli(cli)
