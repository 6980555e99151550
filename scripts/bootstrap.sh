# Sourced by scripts/test and scripts/serve: makes .venv and installs the project whenever
# pyproject.toml or requirements.lock changed since the last install. Needs only python3 on
# the machine. The runtime dependencies come from requirements.lock (scripts/lock: pinned,
# hash-checked), the versions the Docker image runs; then the project itself, which adds
# only what the lock lacks (the dev extra, or a dependency added since the lock was written).
# CHATGATE_EXTRA=dev (scripts/test) adds the dev extra (pytest, mypy, playwright, ...);
# scripts/serve installs only what the gateway runs on.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ ! -x .venv/bin/python ]; then
    echo "bootstrap: creating .venv" >&2
    python3 -m venv .venv
fi
extra="${CHATGATE_EXTRA:-}"
hash="$(cat pyproject.toml requirements.lock | sha256sum | cut -d' ' -f1)"
stamp=".venv/.chatgate-installed"
have="$(cat "$stamp" 2>/dev/null || true)"
# A dev install also serves `serve`: only a missing or older install, or a missing extra,
# means installing again.
if [ "$have" != "$hash dev" ] && [ "$have" != "$hash ${extra:-runtime}" ]; then
    if [ -n "$extra" ]; then
        echo "bootstrap: installing chatgate and its $extra extra into .venv" >&2
        spec=".[$extra]"
    else
        echo "bootstrap: installing chatgate (runtime dependencies only) into .venv" >&2
        spec="."
    fi
    .venv/bin/python -m pip install -q --upgrade pip >&2
    .venv/bin/python -m pip install -q --require-hashes -r requirements.lock >&2
    .venv/bin/python -m pip install -q -e "$spec" >&2
    echo "$hash ${extra:-runtime}" > "$stamp"
fi
export PATH="$ROOT/.venv/bin:$PATH"
mkdir -p var
