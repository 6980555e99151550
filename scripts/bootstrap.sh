# Sourced by scripts/test and scripts/serve: makes .venv and installs the project
# (with the dev extra) whenever pyproject.toml changed since the last install.
# Needs only python3 on the machine.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ ! -x .venv/bin/python ]; then
    echo "bootstrap: creating .venv" >&2
    python3 -m venv .venv
fi
stamp=".venv/.chatgate-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "bootstrap: installing chatgate and its dev extra into .venv" >&2
    .venv/bin/python -m pip install -q --upgrade pip >&2
    .venv/bin/python -m pip install -q -e '.[dev]' >&2
    echo "$want" > "$stamp"
fi
export PATH="$ROOT/.venv/bin:$PATH"
mkdir -p var
