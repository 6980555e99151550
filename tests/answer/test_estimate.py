"""Token estimates: documented method, never zero for non-empty text."""

from __future__ import annotations

from app.answer.estimate import estimate_prompt_tokens, estimate_text_tokens


def test_four_bytes_a_token_rounded_up() -> None:
    assert estimate_text_tokens("") == 0
    assert estimate_text_tokens("a") == 1
    assert estimate_text_tokens("abcd") == 1
    assert estimate_text_tokens("abcde") == 2


def test_non_ascii_counts_by_utf8_bytes() -> None:
    assert estimate_text_tokens("čččč") == 2      # 8 bytes
    assert estimate_text_tokens("日本語の") == 3   # 12 bytes


def test_prompt_adds_per_message_overhead() -> None:
    messages = [{"role": "system", "content": "abcd"}, {"role": "user", "content": "abcdefgh"}]
    assert estimate_prompt_tokens(messages) == 3 + (4 + 1) + (4 + 2)
    assert estimate_prompt_tokens([]) == 3
