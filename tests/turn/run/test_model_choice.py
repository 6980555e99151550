"""Choosing a model: a native turn names one (the thread keeps it), /v1 uses the request's,
/v1/models lists them all, and a key limited to some models is refused the others (403
`model_not_allowed`), set with `scripts/keys.py models`."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from app.demo_llm.scenarios import split_context
from tests.e2e.helpers import messages, new_thread
from tests.scripts.test_keys_cli import create_key, keys_cli, unique
from tests.support.gateway import DemoLlm, post_turn, same_loop_gateway
from tests.support.models_files import two_models


async def turn_with(client: httpx.AsyncClient, thread: str, text: str, model: str) -> str:
    """A turn that names its model; the names of its events."""
    response = await client.post(f"/api/threads/{thread}/messages",
                                 json={"content": text, "model": model})
    assert response.status_code == 200, response.text
    return response.text


def sent_models(demo: DemoLlm, text: str) -> list[str]:
    """The models asked upstream for the streamed requests whose user text (after any
    MSG_CONTEXT block, which holds the history) contains `text`."""
    return [r["body"]["model"] for r in demo.requests(50)
            if r["body"].get("stream")
            and text in split_context(str(r["body"]["messages"][-1]["content"]))[1]]


async def test_a_turn_names_a_model_and_its_thread_keeps_it(
    database_url: str, demo_llm: DemoLlm, tmp_path: Path
) -> None:
    text = unique("pick")
    async with (same_loop_gateway(database_url, demo_llm,
                                  models_file=two_models(tmp_path, demo_llm)) as gw,
                gw.client(await gw.api_key("picker")) as client):
        listed = (await client.get("/api/models")).json()
        v1_listed = (await client.get("/v1/models")).json()
        thread = await new_thread(client, "titled")
        chosen = await turn_with(client, thread, text + " one", "second")
        kept = await post_turn(client, thread, text + " two")
        threads = (await client.get("/api/threads")).json()["threads"]
        unknown = await client.post(f"/api/threads/{thread}/messages",
                                    json={"content": "x", "model": "nope"})
        wrong = await client.post(f"/api/threads/{thread}/messages",
                                  json={"content": "x", "model": 5})
        rows = await messages(client, thread)
        v1 = await client.post("/v1/chat/completions", json={
            "model": "second", "messages": [{"role": "user", "content": text + " v1"}]})
        v1_unknown = await client.post("/v1/chat/completions", json={
            "model": "third", "messages": [{"role": "user", "content": "x"}]})
    assert listed == {"models": [{"name": "first"}, {"name": "second"}], "default": "first"}
    assert [m["id"] for m in v1_listed["data"]] == ["first", "second"]
    assert "event: message_end" in chosen and kept.names[-1] == "message_end"
    assert [r["metadata"]["answered_by"]["model"] for r in rows if r["role"] == "assistant"
            ] == ["second", "second"]
    assert sent_models(demo_llm, text + " one") == sent_models(demo_llm, text + " two") == [
        "demo-2"]
    assert next(t for t in threads if t["id"] == thread)["model"] == "second"
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "model_not_found")
    assert unknown.json()["error"]["message"] == (
        "there is no model named 'nope'; the models are 'first', 'second'")
    assert wrong.status_code == 400
    assert len(rows) == 4  # the refused turns stored nothing
    assert v1.status_code == 200 and sent_models(demo_llm, text + " v1") == ["demo-2"]
    assert (v1_unknown.status_code, v1_unknown.json()["error"]["code"]) == (
        404, "model_not_found")
    assert v1_unknown.json()["error"]["message"] == (
        "The model 'third' does not exist; the models are 'first', 'second'")


async def test_a_key_limited_to_some_models_is_refused_the_others(
    database_url: str, demo_llm: DemoLlm, tmp_path: Path
) -> None:
    user = unique("limited")
    key_id, key = create_key(database_url, user)
    done = keys_cli(database_url, "models", key_id, "--allow", "second")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "models of" in done.stdout and "second" in done.stdout
    refused_cli = keys_cli(database_url, "models", key_id)
    assert refused_cli.returncode == 2
    listing = keys_cli(database_url, "list", "--user", user, env={"COLUMNS": "80"})
    assert re.search(r"^models\s+second$", listing.stdout, re.MULTILINE), listing.stdout
    text = unique("limited turn")
    async with (same_loop_gateway(database_url, demo_llm,
                                  models_file=two_models(tmp_path, demo_llm)) as gw,
                gw.client(key) as client):
        listed = (await client.get("/api/models")).json()
        thread = await new_thread(client, "titled")
        native = await client.post(f"/api/threads/{thread}/messages",
                                   json={"content": "x", "model": "first"})
        default = await post_turn(client, thread, text)
        v1 = await client.post("/v1/chat/completions", json={
            "model": "first", "messages": [{"role": "user", "content": "x"}]})
    assert listed == {"models": [{"name": "second"}], "default": "second"}
    assert (native.status_code, native.json()["error"]["code"]) == (403, "model_not_allowed")
    assert default.names[-1] == "message_end"
    assert sent_models(demo_llm, text) == ["demo-2"]  # the first model it may use
    assert v1.status_code == 403
    assert v1.json()["error"] == {"message": "This key may not use the model 'first'",
                                  "type": "permission_error", "param": "model",
                                  "code": "model_not_allowed"}
