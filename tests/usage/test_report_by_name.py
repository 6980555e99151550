"""Usage grouped by model shows the names users pick (`fast`), not the upstream ids the rows
record (`demo-fast`): the admin dashboard's report and `chatgate usage report`, on both
databases."""

from __future__ import annotations

import json
from pathlib import Path

from app.config.catalog import ModelDefaults, parse_catalog
from app.usage.admin_reports import model_names
from tests.e2e.helpers import keyed_client, new_thread
from tests.support.gateway import DemoLlm, StartGateway
from tests.support.scripts import run_script


def models_file(tmp_path: Path, demo: DemoLlm) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(f"""
[servers.demo]
base_url = "{demo.base_url}"

[[models]]
name = "fast"
server = "demo"
model_id = "demo-fast"

[[models]]
name = "smart"
server = "demo"
model_id = "demo-smart"
""")
    return path


async def test_the_dashboard_and_the_report_group_by_the_name_picked(
    live_backend: str, demo_llm: DemoLlm, start_gateway: StartGateway, tmp_path: Path,
) -> None:
    path = models_file(tmp_path, demo_llm)
    gateway = start_gateway(live_backend, upstream=demo_llm, env={
        "CHATGATE_MODELS_FILE": str(path), "CHATGATE_TITLE_CALLS": "false"})
    async with await keyed_client(gateway, "picker") as client:
        thread_id = await new_thread(client)
        for model in ("fast", "smart", "smart"):
            body = {"content": f"hello {model}", "model": model}
            async with client.stream("POST", f"/api/threads/{thread_id}/messages",
                                     json=body) as response:
                assert response.status_code == 200
                await response.aread()
    async with gateway.client(await gateway.api_key("admin", admin=True)) as admin:
        answer = (await admin.get("/api/admin/usage/report",
                                  params={"group_by": "model"})).json()
    calls = {row["model"]: row["llm_call_count"] for row in answer["rows"]}
    assert calls == {"fast": 1, "smart": 2}
    result = run_script("usage.py", "report", "--by", "model", "--json", "--database-url",
                        gateway.database_url, env={"CHATGATE_MODELS_FILE": str(path)})
    assert result.returncode == 0, result.stdout + result.stderr
    rows = json.loads(result.stdout)["rows"]
    assert {row["model"]: row["llm_call_count"] for row in rows} == calls


def test_an_id_two_names_share_is_shown_as_it_is() -> None:
    catalog = parse_catalog({
        "servers": {"a": {"base_url": "http://a/v1"}, "b": {"base_url": "http://b/v1"}},
        "models": [{"name": "fast", "server": "a", "model_id": "m-1"},
                   {"name": "also-fast", "server": "b", "model_id": "m-1"},
                   {"name": "smart", "server": "a", "model_id": "m-2"}]}, ModelDefaults())
    assert model_names(catalog.models) == (("m-2", "smart"),)
