# Sourced by scripts/test and scripts/serve: makes .venv and installs the project whenever
# pyproject.toml or requirements.lock changed since the last install. Needs only python3 on
# the machine. The runtime dependencies come from requirements.lock (scripts/lock: pinned,
# hash-checked), the versions the Docker image runs; then the project itself, which adds
# only what the lock lacks (the dev extra, or a dependency added since the lock was written)
# and the `chatgate` command (.venv/bin/chatgate).
# CHATGATE_EXTRA=dev (scripts/test) adds the dev extra (pytest, mypy, playwright, ...);
# scripts/serve installs only what the gateway runs on.
# A first start takes a minute or more: each step says what it does, then how long it took.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# `bootstrap_step WHAT COMMAND...`: says WHAT, runs the command, says how long it took.
bootstrap_step() {
    local what="$1" started
    shift
    echo "bootstrap: $what..." >&2
    started="$(date +%s%N)"
    "$@"
    echo "bootstrap: $what: done in $(bootstrap_seconds "$started")" >&2
}

# Seconds since `date +%s%N` said $1, to a tenth.
bootstrap_seconds() {
    local ms=$(( ($(date +%s%N) - $1) / 1000000 ))
    printf '%d.%d s' $(( ms / 1000 )) $(( ms % 1000 / 100 ))
}

bootstrap_started="$(date +%s%N)"
bootstrap_worked=""
if [ ! -x .venv/bin/python ]; then
    bootstrap_step "creating .venv (python3 -m venv)" python3 -m venv .venv
    bootstrap_worked=1
fi
extra="${CHATGATE_EXTRA:-}"
hash="$(cat pyproject.toml requirements.lock | sha256sum | cut -d' ' -f1)"
stamp=".venv/.chatgate-installed"
have="$(cat "$stamp" 2>/dev/null || true)"
# A dev install also serves `serve`: only a missing or older install, or a missing extra,
# means installing again.
if [ "$have" != "$hash dev" ] && [ "$have" != "$hash ${extra:-runtime}" ]; then
    if [ -n "$extra" ]; then
        spec=".[$extra]"
        what="chatgate and its $extra extra"
    else
        spec="."
        what="chatgate (runtime dependencies only)"
    fi
    bootstrap_step "upgrading pip" .venv/bin/python -m pip install -q --upgrade pip >&2
    bootstrap_step "installing the pinned dependencies (requirements.lock)" \
        .venv/bin/python -m pip install -q --require-hashes -r requirements.lock >&2
    bootstrap_step "installing $what into .venv" \
        .venv/bin/python -m pip install -q -e "$spec" >&2
    echo "$hash ${extra:-runtime}" > "$stamp"
    bootstrap_worked=1
fi
if [ -n "$bootstrap_worked" ]; then
    echo "bootstrap: ready in $(bootstrap_seconds "$bootstrap_started"); the next start" \
         "skips all this unless pyproject.toml or requirements.lock change" >&2
fi
export PATH="$ROOT/.venv/bin:$PATH"
mkdir -p var
