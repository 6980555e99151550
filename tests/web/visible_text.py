"""What a rendered answer must still show: the words of the stored markdown, in order."""

from __future__ import annotations

import re

#: Letters and digits (any script); underscores are markdown's emphasis marks, not words.
_TOKEN = re.compile(r"[^\W_]+")
_LIST_MARKER = re.compile(r"^(\s*)[-*+] ", re.MULTILINE)
#: A code fence's info string (```python) names the language; it is not shown.
_FENCE_INFO = re.compile(r"^( {0,3}(?:`{3,}|~{3,}))[^`\n]*$", re.MULTILINE)


def alnum_tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def missing_tokens(stored: str, shown: str) -> list[str]:
    """The stored text's tokens that `shown` does not have in the same order (empty: none
    lost). Markdown only removes formatting characters, so every word must survive."""
    stored = _FENCE_INFO.sub(r"\1", stored)
    shown_tokens = alnum_tokens(shown)
    position = 0
    missing: list[str] = []
    for token in alnum_tokens(stored):
        try:
            position = shown_tokens.index(token, position) + 1
        except ValueError:
            missing.append(token)  # keep the position: later words must still come after
    return missing


def without_list_markers(text: str) -> str:
    """A simple bullet list as the browser's innerText shows it: bullets are drawn, not text."""
    return _LIST_MARKER.sub(r"\1", text)
