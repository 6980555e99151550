"""The inline tool call settings: read from the environment and from a models file entry,
and a bad value refused at start in one sentence naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app.config.models_file import load_catalog
from app.config.settings import Settings
from app.gateway.startup import settings_sentence


def test_the_defaults_read_no_tool_calls() -> None:
    settings = Settings(_env_file=None)
    assert (settings.tool_format, settings.tool_tag) == ("none", "tool_call")


def test_the_environment_sets_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATGATE_TOOL_FORMAT", "hermes")
    monkeypatch.setenv("CHATGATE_TOOL_TAG", "function_call")
    settings = Settings(_env_file=None)
    assert (settings.tool_format, settings.tool_tag) == ("hermes", "function_call")


@pytest.mark.parametrize(("name", "value", "sentence"), [
    ("CHATGATE_TOOL_FORMAT", "Hermes", "CHATGATE_TOOL_FORMAT must be none or hermes, "
     "not 'Hermes'"),
    ("CHATGATE_TOOL_TAG", "tool call", "CHATGATE_TOOL_TAG must be a tag name of letters, "
     "digits, '-' and '_' (such as tool_call), not 'tool call'"),
])
def test_a_bad_value_is_one_sentence(monkeypatch: pytest.MonkeyPatch, name: str, value: str,
                                     sentence: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as raised:
        Settings(_env_file=None)
    assert settings_sentence(raised.value) == sentence


MODELS = """
[servers.local]
base_url = "http://127.0.0.1:9/v1"

[[models]]
name = "qwen"
server = "local"
tool_format = "hermes"
tool_tag = "call"

[[models]]
name = "plain"
server = "local"
"""


def test_the_models_file_sets_them_per_model(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "models.toml"
    path.write_text(MODELS, encoding="utf-8")
    monkeypatch.setenv("CHATGATE_MODELS_FILE", str(path))
    catalog = load_catalog(Settings(_env_file=None)).catalog
    qwen, plain = catalog.get("qwen"), catalog.get("plain")
    assert qwen is not None and plain is not None
    assert (qwen.tool_format, qwen.tool_tag) == ("hermes", "call")
    assert (plain.tool_format, plain.tool_tag) == ("none", "tool_call")


@pytest.mark.parametrize(("old", "new", "said"), [
    ('tool_format = "hermes"', 'tool_format = "qwen"',
     "field 'tool_format' must be one of none, hermes"),
    ('tool_tag = "call"', 'tool_tag = "<call>"',
     "field 'tool_tag' must be letters, digits, '-' and '_'"),
])
def test_a_bad_models_file_entry_is_one_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 old: str, new: str, said: str) -> None:
    path = tmp_path / "models.toml"
    path.write_text(MODELS.replace(old, new), encoding="utf-8")
    monkeypatch.setenv("CHATGATE_MODELS_FILE", str(path))
    with pytest.raises(ValueError, match=said):
        load_catalog(Settings(_env_file=None))
