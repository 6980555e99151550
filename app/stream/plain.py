"""Markdown as one line of plain words, for the places that show text without rendering it:
a thread's preview in the list and an automatic title. Pure.

Not a markdown parser: the few constructs a chat answer uses (headings, emphasis, code,
links, images, lists, quotes, tables, rules, fences) lose their markup and keep their words.
Emphasis marks are taken only where markdown would take them (around a word, not inside
one), so `2*3*4`, `snake_case_name` or a lone `*` stay as written."""

from __future__ import annotations

import re

_FENCE = re.compile(r"^\s*(```|~~~).*$", re.MULTILINE)
_RULE = re.compile(r"^\s*([-*_])(\s*\1){2,}\s*$", re.MULTILINE)
_TABLE_RULE = re.compile(r"^\s*\|?(\s*:?-+:?\s*\|)+\s*(:?-+:?)?\s*$", re.MULTILINE)
_LINE_MARKS = re.compile(
    r"^\s{0,3}(?:>\s?)*(?:#{1,6}\s+|[-*+]\s+(?:\[[ xX]\]\s+)?|\d{1,9}[.)]\s+)?", re.MULTILINE)
_CLOSING_HASHES = re.compile(r"\s+#+\s*$", re.MULTILINE)
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)\s]*(?:\s+\"[^\"]*\")?\)")
_LINK = re.compile(r"\[([^\]]+)\]\([^)\s]*(?:\s+\"[^\"]*\")?\)")
_AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]+)>")
_CODE = re.compile(r"(`+)(.+?)\1")
_STRONG = re.compile(r"(?<![\w*])(\*\*|__)(?=\S)(.+?)(?<=\S)\1(?![\w*])")
_EMPHASIS = re.compile(r"(?<![\w*])([*_])(?=[^\s*_])(.+?)(?<=[^\s*_])\1(?![\w*])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_ESCAPABLE = "\\`*_{}[]()#+-.!|>~"
_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|>~])")
#: An escaped character waits as a private-use character while the markup goes, so that
#: `\*not emphasis\*` keeps its stars.
_HELD = 0xE000
_HELD_BACK = re.compile(f"[{chr(_HELD)}-{chr(_HELD + len(_ESCAPABLE) - 1)}]")
_PIPES = re.compile(r"\s*\|\s*")


def plain_text(markdown: str) -> str:
    """The words of `markdown` on one line: markup dropped, white space collapsed."""
    # A text that holds such characters itself keeps them and its backslashes as written.
    hold = _HELD_BACK.search(markdown) is None
    text = markdown
    if hold:
        text = _ESCAPE.sub(lambda m: chr(_HELD + _ESCAPABLE.index(m.group(1))), text)
    text = _FENCE.sub("", text)
    text = _RULE.sub("", text)
    table = _TABLE_RULE.search(text) is not None
    text = _TABLE_RULE.sub("", text)
    text = _LINE_MARKS.sub("", text)
    text = _CLOSING_HASHES.sub("", text)
    text = _IMAGE.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _AUTOLINK.sub(r"\1", text)
    text = _CODE.sub(lambda m: m.group(2).strip(), text)
    for _ in range(2):  # nested: ***both*** is strong inside emphasis
        text = _STRONG.sub(r"\2", text)
        text = _EMPHASIS.sub(r"\2", text)
    text = _STRIKE.sub(r"\1", text)
    if table:  # cells side by side; a pipe outside a table is just a character
        text = "\n".join(_PIPES.sub(" ", line).strip(" |") for line in text.splitlines())
    if hold:
        text = _HELD_BACK.sub(lambda m: _ESCAPABLE[ord(m.group(0)) - _HELD], text)
    return " ".join(text.split())
