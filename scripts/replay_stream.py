#!/usr/bin/env bash
''''exec "$(dirname "$0")/venv_python" "$0" "$@" # '''

# replay a traced stream through the MarkerFilter: `chatgate replay` (app/cli/replay.py), run
# from this script's old path. The first line, a shell command to the shell and a string to
# Python, runs this file with the checkout's .venv (scripts/venv_python), so
# `scripts/replay_stream.py ...` works as `.venv/bin/python scripts/replay_stream.py ...` does.

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.cli.replay import main

if __name__ == "__main__":
    main(sys.argv[1:])
