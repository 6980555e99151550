"""The models file: what a good one makes, and one sentence naming the entry and the field
for a bad one; the model a turn uses."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from app.config.catalog import (
    ModelDefaults,
    ModelNotAllowed,
    ModelNotOffered,
    ModelsFileError,
    choose,
    parse_catalog,
    single_server_catalog,
)
from app.config.models_file import load_catalog
from app.config.settings import Settings

GOOD = """
[servers.hosted]
base_url = "https://api.example.com/v1"
api_key_env = "HOSTED_KEY"

[servers.local]
base_url = "http://127.0.0.1:8001/v1"

[[models]]
name = "smart"
server = "hosted"
model_id = "gpt-4o"
max_tokens = 2048
first_token_timeout_s = 12.5
prices = { prompt = 2.5, completion = 10.0 }
reasoning_format = "think-prefilled"
reasoning_tag = "think"
fallbacks = ["fast"]

[[models]]
name = "fast"
server = "local"
continuation = false
"""

DEFAULTS = ModelDefaults(max_tokens=1024, first_token_timeout_s=30.0, max_retries=1)


def parsed(text: str) -> Any:
    return parse_catalog(tomllib.loads(text), DEFAULTS)


def test_a_good_file_makes_every_model_with_its_server_and_defaults() -> None:
    catalog = parsed(GOOD)
    assert catalog.listed == ["smart", "fast"] and catalog.default == "smart"
    smart, fast = catalog["smart"], catalog["fast"]
    assert (smart.server.name, smart.server.base_url, smart.server.api_key_env) == (
        "hosted", "https://api.example.com/v1", "HOSTED_KEY")
    assert (smart.model_id, smart.max_tokens, smart.first_token_timeout_s) == (
        "gpt-4o", 2048, 12.5)
    assert smart.prices == (2.5, 10.0)
    assert (smart.reasoning_format, smart.reasoning_tag) == ("think-prefilled", "think")
    assert smart.continuation and not fast.continuation
    # a model with fallbacks goes to them instead of retrying its own server
    assert smart.max_retries == 0 and fast.max_retries == 1
    assert (fast.model_id, fast.max_tokens) == ("fast", 1024)
    assert [s.name for s in catalog.chain("smart")] == ["smart", "fast"]
    assert [s.name for s in catalog.chain("fast")] == ["fast"]


@pytest.mark.parametrize(("change", "sentence"), [
    (('name = "fast"', 'name = "smart"'), "model 'smart': field 'name' is used twice"),
    (('fallbacks = ["fast"]', 'fallbacks = ["nope"]'),
     "model 'smart': field 'fallbacks' names 'nope', which is no model; the models are "
     "'smart', 'fast'"),
    (('server = "local"', 'server = "locl"'),
     "model 'fast': field 'server' names 'locl', which is no [servers] table; the tables are "
     "'hosted', 'local'"),

    (("max_tokens = 2048", "max_tokens = -3"),
     "model 'smart': field 'max_tokens' must be a whole number above 0"),
    (("max_tokens = 2048", 'max_tokens = "many"'),
     "model 'smart': field 'max_tokens' must be a whole number above 0"),
    (("continuation = false", 'continuation = "no"'),
     "model 'fast': field 'continuation' must be true or false"),
    (('reasoning_format = "think-prefilled"', 'reasoning_format = "xml"'),
     "model 'smart': field 'reasoning_format' must be one of think, think-prefilled, none"),
    (('reasoning_tag = "think"', 'reasoning_tag = "th ink"'),
     "model 'smart': field 'reasoning_tag' must be letters, digits, '-' and '_'"),
    (("max_tokens = 2048", "max_tokenz = 2048"), "model 'smart': field 'max_tokenz' is unknown"),
    (('base_url = "http://127.0.0.1:8001/v1"', 'base_url = "ftp://x"'),
     "server 'local': field 'base_url' must be an http(s) URL, or \"demo\" for the built-in "
     "demo model server, not 'ftp://x'"),
    (('api_key_env = "HOSTED_KEY"', 'api_key_env = "sk-live-123 456"'),
     "server 'hosted': field 'api_key_env' must be the name of an environment variable"),
    (("prices = { prompt = 2.5, completion = 10.0 }", "prices = { prompt = 2.5 }"),
     "model 'smart': field 'prices' must be {prompt = USD/M, completion = USD/M}"),
])
def test_a_bad_file_is_one_sentence_naming_the_entry_and_the_field(
        change: tuple[str, str], sentence: str) -> None:
    old, new = change
    assert old in GOOD
    with pytest.raises(ModelsFileError) as raised:
        parsed(GOOD.replace(old, new, 1))
    assert str(raised.value) == sentence


@pytest.mark.parametrize("url", ["https://me:hunter2@api.example.com/v1",
                                 "https://sk-live-123@api.example.com/v1"])
def test_a_base_url_with_credentials_is_refused_without_repeating_them(url: str) -> None:
    """The key belongs in the variable `api_key_env` names: a URL carrying it would fail
    every call to the model (the client sends the key as a bearer token and refuses a URL
    with credentials besides), and would put it in the catalog, which may be logged."""
    with pytest.raises(ModelsFileError) as raised:
        parsed(GOOD.replace("https://api.example.com/v1", url, 1))
    assert str(raised.value) == (
        "server 'hosted': field 'base_url' must not hold a user name and password; name the "
        "environment variable that holds the key in field 'api_key_env'")
    assert "hunter2" not in str(raised.value) and "sk-live" not in str(raised.value)


def test_the_loader_reads_the_key_from_the_variable_the_file_names(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text(GOOD)
    settings = Settings(models_file=str(path), upstream_base_url=None)
    loaded = load_catalog(settings, {"HOSTED_KEY": "sk-secret"})
    assert loaded.keys == {"hosted": "sk-secret", "local": "not-needed"}
    assert "sk-secret" not in repr(loaded.catalog)
    with pytest.raises(ModelsFileError) as raised:
        load_catalog(settings, {})
    assert str(raised.value) == ("server 'hosted': field 'api_key_env' names HOSTED_KEY, "
                                 "which is not set")


def test_an_unreadable_or_broken_file_is_one_sentence(tmp_path: Path) -> None:
    missing = Settings(models_file=str(tmp_path / "none.toml"))
    with pytest.raises(ModelsFileError, match=r"^the models file .*none.toml cannot be read"):
        load_catalog(missing, {})
    broken = tmp_path / "broken.toml"
    broken.write_text("[[models]\nname=")
    with pytest.raises(ModelsFileError, match="is not valid TOML"):
        load_catalog(Settings(models_file=str(broken)), {})


def test_without_a_file_the_settings_make_todays_one_server() -> None:
    settings = Settings(upstream_base_url="http://up/v1", upstream_api_key="k",
                        upstream_model="demo-1", models="a,b")
    loaded = load_catalog(settings, {})
    catalog = loaded.catalog
    assert catalog.default == "demo-1" and catalog.listed == ["a", "b"]
    assert [s.model_id for s in catalog.models] == ["demo-1", "a", "b"]
    assert {s.server.base_url for s in catalog.models} == {"http://up/v1"}
    assert loaded.keys == {"default": "k"}
    assert not any(s.continuation for s in catalog.models)
    plain = load_catalog(Settings(upstream_base_url="http://up/v1"), {}).catalog
    assert plain.listed == ["demo-1"]


def test_the_model_of_a_turn() -> None:
    catalog = parsed(GOOD)
    assert choose(catalog, "fast", "smart", None) == "fast"
    assert choose(catalog, None, "fast", None) == "fast"  # the thread's last choice
    assert choose(catalog, None, "gone", None) == "smart"  # left the file: the default
    assert choose(catalog, None, None, ["fast"]) == "fast"  # a limited key's first model
    with pytest.raises(ModelNotOffered):
        choose(catalog, "nope", None, None)
    with pytest.raises(ModelNotAllowed):
        choose(catalog, "smart", None, ["fast"])


def test_the_models_a_key_may_use() -> None:
    """What every list a key is shown holds: the listed models its limit allows, in the
    file's order (a name the catalog no longer has is simply not there)."""
    catalog = parsed(GOOD)
    assert catalog.usable(None) == ["smart", "fast"]
    assert catalog.usable(["fast", "gone"]) == ["fast"]
    assert catalog.usable([]) == []
    unlisted = single_server_catalog("http://x/v1", ["a"], "b", DEFAULTS)
    assert unlisted.usable(None) == unlisted.usable(["a", "b"]) == ["a"]


def test_one_server_catalog_keeps_an_unlisted_default() -> None:
    catalog = single_server_catalog("http://x/v1", ["a"], "b", DEFAULTS)
    assert catalog.listed == ["a"] and catalog.default == "b" and catalog.get("b") is not None


def test_a_reference_to_a_missing_default_names_it_and_the_models() -> None:
    with pytest.raises(ModelsFileError) as raised:
        parsed('default = "smrt"\n' + GOOD)
    assert str(raised.value) == ("field 'default' names 'smrt', which is no model; the models "
                                 "are 'smart', 'fast'")


def test_a_demo_server_is_placed_where_the_demo_model_server_listens(tmp_path: Path) -> None:
    """`base_url = "demo"`: scripts/serve starts the demo model server and says where; a
    gateway started any other way cannot reach it and is told so."""
    path = tmp_path / "models.toml"
    path.write_text(GOOD.replace('"http://127.0.0.1:8001/v1"', '"demo"', 1))
    placed = load_catalog(Settings(models_file=str(path),
                                   demo_base_url="http://127.0.0.1:8123/v1"),
                          {"HOSTED_KEY": "k"}).catalog
    assert placed.wants_demo is False
    assert placed["fast"].server.base_url == "http://127.0.0.1:8123/v1"
    assert placed["smart"].server.base_url == "https://api.example.com/v1"
    assert load_catalog(Settings(models_file=str(path)), {"HOSTED_KEY": "k"},
                        place_demo=False).catalog.wants_demo
    with pytest.raises(ModelsFileError) as raised:
        load_catalog(Settings(models_file=str(path)), {"HOSTED_KEY": "k"})
    assert str(raised.value).startswith("server 'local': base_url \"demo\" is the built-in "
                                        "demo model server, which scripts/serve")
