"""LiteLLM's proxy for scripts/bench_gateway.py's `--litellm`: the same upstream, fronted by the
proxy most deployments would otherwise run, measured in the same run as the gateway.

LiteLLM lives in the client tests' cached venv (scripts/test_clients.sh makes it, once per
pinned version, outside .venv: it is ~380 MB and must not pin its choices onto ours). Its
proxy needs the `proxy` extra's packages on top; they go into that same venv once per
version (a stamp file beside test_clients.sh's). The extra's `litellm-*` companions (the
database migrations, the enterprise hooks) are left out: the proxy runs without a database
or a licence, and the registry does not carry every pinned companion.

    .venv/bin/python scripts/bench_litellm.py --upstream-port PORT [--port 4000]

runs the proxy alone, for `bench_gateway.py --compare` by hand; loopback only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import typer

ROOT = Path(__file__).resolve().parents[1]
CLIENTS_SCRIPT = ROOT / "scripts" / "test_clients.sh"
PROXY_STAMP = ".chatgate-litellm-proxy"
#: LiteLLM's proxy imports for 10 to 20 s on a shared machine before it listens.
START_TIMEOUT_S = 180.0
HEALTH_PATH = "/health/liveliness"
#: The requirements of LiteLLM's `proxy` extra, less its `litellm-*` companions, read from
#: the installed distribution by the venv's own python (so they follow the pinned version).
PROXY_REQUIREMENTS = """
from importlib.metadata import requires
from packaging.requirements import Requirement
for text in requires("litellm") or []:
    req = Requirement(text)
    if (req.marker and req.marker.evaluate({"extra": "proxy"})
            and not req.marker.evaluate({"extra": ""}) and not req.name.startswith("litellm")):
        req.marker = None
        print(req)
"""


def litellm_version() -> str:
    """The version the client tests pin (test_clients.sh's CHATGATE_LITELLM_VERSION)."""
    found = re.search(r'^CHATGATE_LITELLM_VERSION="([^"]+)"', CLIENTS_SCRIPT.read_text(),
                      re.MULTILINE)
    if found is None:
        raise RuntimeError(f"no CHATGATE_LITELLM_VERSION in {CLIENTS_SCRIPT}")
    return found.group(1)


def litellm_venv() -> Path:
    """The venv test_clients.sh makes: ${XDG_CACHE_HOME:-~/.cache}/chatgate-clients/."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "chatgate-clients" / "litellm-venv"


def _stamp(venv: Path, name: str) -> str:
    try:
        return (venv / name).read_text().strip()
    except OSError:
        return ""


def ensure_litellm_proxy() -> Path:
    """The venv, with LiteLLM (through test_clients.sh, which makes or keeps it) and its
    proxy's packages; idempotent: a run whose stamps say the version installs nothing."""
    venv, version = litellm_venv(), litellm_version()
    if _stamp(venv, ".chatgate-litellm") != version:
        subprocess.run(["bash", "-c", f"source {CLIENTS_SCRIPT}"], cwd=ROOT, check=True,
                       timeout=900)
        if _stamp(venv, ".chatgate-litellm") != version:
            raise RuntimeError(f"test_clients.sh could not install litellm=={version}")
    if _stamp(venv, PROXY_STAMP) != version:
        python = str(venv / "bin" / "python")
        print(f"litellm: installing its proxy's packages into {venv} (once per version)",
              file=sys.stderr)
        wanted = subprocess.run([python, "-c", PROXY_REQUIREMENTS], check=True, timeout=60,
                                capture_output=True, text=True).stdout.split()
        subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        *wanted], check=True, timeout=900)
        (venv / PROXY_STAMP).write_text(version + "\n")
    return venv


def proxy_config(upstream: str) -> str:
    """One model, `bench-1`, on the bench upstream; no database, no callbacks, and no key
    asked of the clients: the gateway it is compared with runs with its auth off."""
    return (f"model_list:\n  - model_name: bench-1\n    litellm_params:\n"
            f"      model: openai/bench-1\n      api_base: {upstream}\n"
            f"      api_key: bench\n"
            f"litellm_settings:\n  telemetry: false\n  drop_params: true\n"
            f"general_settings:\n  dangerously_permit_weak_or_unset_master_key: true\n")


def proxy_env() -> dict[str, str]:
    """No database or master key from the caller's environment (the proxy would want
    prisma, or a key on every request); the packaged cost map rather than a fetch."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "LITELLM_MASTER_KEY", "REDIS_HOST", "REDIS_URL")}
    env.update({"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR",
                "LITELLM_MODE": "PRODUCTION", "PYTHONUNBUFFERED": "1"})
    return env


def proxy_argv(venv: Path, config: Path, port: int) -> list[str]:
    return [str(venv / "bin" / "litellm"), "--config", str(config), "--host", "127.0.0.1",
            "--port", str(port), "--num_workers", "1", "--telemetry", "False"]


def start_command(argv: list[str]) -> str:
    """The command line as a shell would take it, with the environment it adds."""
    return ("LITELLM_LOCAL_MODEL_COST_MAP=True LITELLM_LOG=ERROR LITELLM_MODE=PRODUCTION "
            + " ".join(argv))


def main(upstream_port: int = typer.Option(..., min=1, max=65535),
         port: int = typer.Option(4000, min=1, max=65535)) -> None:
    venv = ensure_litellm_proxy()
    config = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_litellm_{port}.yaml"
    config.write_text(proxy_config(f"http://127.0.0.1:{upstream_port}/v1"))
    argv = proxy_argv(venv, config, port)
    print(f"config {config}:\n{config.read_text()}{start_command(argv)}", flush=True)
    os.execve(argv[0], argv, proxy_env())


if __name__ == "__main__":
    typer.run(main)
