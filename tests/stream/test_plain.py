"""Markdown as one line of plain words (thread previews, automatic titles)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.stream.plain import plain_text


@pytest.mark.parametrize(
    ("markdown", "plain"),
    [
        ("# **Bold** heading and `code`", "Bold heading and code"),
        ("about **Break**.\n- This answer comes", "about Break. This answer comes"),
        ("## Title ##", "Title"),
        ("*italic*, _also_, ***both*** and ~~gone~~", "italic, also, both and gone"),
        ("A [link](https://example.com \"t\") and ![a cat](https://x/c.png)", "A link and a cat"),
        ("<https://example.com/a>", "https://example.com/a"),
        ("> quoted\n> > twice", "quoted twice"),
        ("1. one\n2) two\n* three\n+ four\n- [x] done", "one two three four done"),
        ("```python\nprint('hi')\n```", "print('hi')"),
        ("| a | b |\n|---|:-:|\n| 1 | 2 |", "a b 1 2"),
        ("text\n\n---\n\nmore", "text more"),
        ("``code with ` tick``", "code with ` tick"),
        (r"not \*emphasis\* here", "not *emphasis* here"),
    ],
)
def test_markup_goes_and_the_words_stay(markdown: str, plain: str) -> None:
    assert plain_text(markdown) == plain


@pytest.mark.parametrize(
    "text",
    ["2*3*4 = 24", "snake_case_name and __dunder__init", "a * b * c", "5 * 3", "x_1 + y_2",
     "C# and F#", "#hashtag", "price: $5 | tax", "1.5 kg"],
)
def test_what_is_not_markup_stays_as_written(text: str) -> None:
    assert plain_text(text) == text


@given(st.text(max_size=200))
def test_any_text_gives_one_line_without_surrounding_space(text: str) -> None:
    plain = plain_text(text)
    assert "\n" not in plain and "\r" not in plain
    assert plain == plain.strip()
    assert "  " not in plain


@given(st.text(alphabet=st.sampled_from("ab \ue000\ue001\ue012\ue013"), max_size=40))
def test_private_use_characters_are_never_taken_for_held_escapes(text: str) -> None:
    assert plain_text(text) == " ".join(text.split())
