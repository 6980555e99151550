"""The reasoning settings: read from the environment, and a bad value refused at start with
one sentence naming the setting and what it may be."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.settings import Settings


def test_the_defaults_are_the_think_tag() -> None:
    settings = Settings(_env_file=None)
    assert (settings.reasoning_format, settings.reasoning_tag) == ("think", "think")


def test_the_environment_sets_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATGATE_REASONING_FORMAT", "think-prefilled")
    monkeypatch.setenv("CHATGATE_REASONING_TAG", "reasoning_v-2")
    settings = Settings(_env_file=None)
    assert (settings.reasoning_format, settings.reasoning_tag) == (
        "think-prefilled", "reasoning_v-2")


@pytest.mark.parametrize(("name", "value", "sentence"), [
    ("CHATGATE_REASONING_FORMAT", "Think",
     "CHATGATE_REASONING_FORMAT must be one of think, think-prefilled, none, not 'Think'"),
    ("CHATGATE_REASONING_FORMAT", "",
     "CHATGATE_REASONING_FORMAT must be one of think, think-prefilled, none, not ''"),
    ("CHATGATE_REASONING_TAG", "<think>",
     "CHATGATE_REASONING_TAG must be a tag name of letters, digits, '-' and '_' (such as "
     "think), not '<think>'"),
    ("CHATGATE_REASONING_TAG", "", "CHATGATE_REASONING_TAG must be a tag name"),
    ("CHATGATE_REASONING_TAG", "think type", "not 'think type'"),
])
def test_a_bad_value_is_one_sentence_naming_the_setting(
        monkeypatch: pytest.MonkeyPatch, name: str, value: str, sentence: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as raised:
        Settings(_env_file=None)
    [error] = raised.value.errors()
    assert sentence in error["msg"] and "\n" not in error["msg"]
