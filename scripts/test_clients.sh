# Sourced by scripts/test before pytest (or run on its own): installs the third-party OpenAI
# clients the tests drive against /v1 that must NOT be project dependencies, each in its own
# cached venv. LiteLLM alone is ~380 MB with boto3 and tokenizers: in .venv it would double
# every set-up and pin its choices onto ours, so it lives in
#   ${XDG_CACHE_HOME:-~/.cache}/chatgate-clients/litellm-venv
# made once per pinned version (a stamp file holds it) and reused across runs and worktrees.
# A failed install is reported and does not stop the suite: the client's test then fails
# under CI (CI=true or CHATGATE_REQUIRE_BROWSER=1) and skips loudly elsewhere.
# (The node clients, openai-node and the Vercel AI SDK, are pinned by tests/turn/openai/node/
# package-lock.json and installed with `npm ci` by their tests, once per lock.)

CHATGATE_LITELLM_VERSION="1.110.2"
chatgate_litellm_venv="${XDG_CACHE_HOME:-$HOME/.cache}/chatgate-clients/litellm-venv"

chatgate_install_litellm() {
    local venv="$1" version="$2" stamp="$1/.chatgate-litellm"
    if [ "$(cat "$stamp" 2>/dev/null || true)" = "$version" ]; then
        return 0
    fi
    echo "clients: installing litellm==$version into $venv (once per version, ~1 minute)" >&2
    rm -rf "$venv"  # a half-made or older venv is made again from nothing
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv" \
        && "$venv/bin/python" -m pip install -q --disable-pip-version-check \
            "litellm==$version" >&2 \
        && echo "$version" > "$stamp"
}

if ! chatgate_install_litellm "$chatgate_litellm_venv" "$CHATGATE_LITELLM_VERSION"; then
    rm -rf "$chatgate_litellm_venv"
    echo "clients: *** litellm could not be installed: its test will fail under CI," \
         "skip elsewhere ***" >&2
fi
unset -f chatgate_install_litellm
unset chatgate_litellm_venv
