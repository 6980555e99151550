"""The reasoning settings: read from the environment, and a bad value refused when the
settings are read at start, the error naming the setting and saying what it may be (the
start turns it into its one sentence)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.config.settings import Settings


def test_the_defaults_are_the_think_tag() -> None:
    settings = Settings(_env_file=None)
    assert (settings.reasoning_format, settings.reasoning_tag) == ("think", "think")


def test_the_environment_sets_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATGATE_REASONING_FORMAT", "think-prefilled")
    monkeypatch.setenv("CHATGATE_REASONING_TAG", "reasoning_v-2")
    settings = Settings(_env_file=None)
    assert (settings.reasoning_format, settings.reasoning_tag) == (
        "think-prefilled", "reasoning_v-2")


def _refused(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> tuple[str, str]:
    """The refused field and what its error says it must be."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as raised:
        Settings(_env_file=None)
    [error] = raised.value.errors()
    return str(error["loc"][0]), error["msg"]


@pytest.mark.parametrize("value", ["Think", "", "thinking", "think prefilled"])
def test_an_unknown_format_is_refused_naming_the_three(
        monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    field, said = _refused(monkeypatch, "CHATGATE_REASONING_FORMAT", value)
    assert field == "reasoning_format"
    assert said == "Input should be 'think', 'think-prefilled' or 'none'"


@pytest.mark.parametrize("value", ["<think>", "", "think type", "thínk", "think>"])
def test_a_tag_that_is_not_a_plain_name_is_refused_saying_what_it_may_be(
        monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    field, said = _refused(monkeypatch, "CHATGATE_REASONING_TAG", value)
    assert field == "reasoning_tag"
    assert said.endswith("a tag name of letters, digits, '-' and '_' (such as think)")
