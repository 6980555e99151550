"""The comparison the conformance render test relies on can fail."""

from tests.web.visible_text import missing_tokens, without_list_markers


def test_formatting_characters_are_not_words() -> None:
    assert missing_tokens("Here is **bold** and `code_x`.", "Here is bold and code_x.") == []


def test_a_lost_word_is_reported() -> None:
    assert missing_tokens("one two three", "one three") == ["two"]


def test_words_out_of_order_are_reported() -> None:
    assert missing_tokens("alpha beta", "beta alpha") != []


def test_list_markers_are_dropped() -> None:
    assert without_list_markers("a\n\n- b\n- c") == "a\n\nb\nc"


def test_a_fence_language_is_not_a_shown_word() -> None:
    stored = "Code:\n\n```html\n<!DOCTYPE html>\n```"
    assert missing_tokens(stored, "Code:\n\n<!DOCTYPE html>") == []
    assert missing_tokens(stored, "Code:\n\n<html>") == ["DOCTYPE"]
