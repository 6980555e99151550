"""The whole-message white-space strip, applied as a stage streams (pure): the spec strips
the visible text's leading and trailing white space, so a stage holds back trailing white
space until more visible text follows, and drops it when none does. The marker filter and
the tool-call split both emit through it."""

from __future__ import annotations

from app.stream.spec import WS


class TrimmedOutput:
    """The base of a stage that emits visible text; the stage sets both slots at its start:
    `_started` (a visible non-white-space character has been emitted) and `_ws` (white space
    held back after the last visible character)."""

    __slots__ = ("_started", "_ws")
    _started: bool
    _ws: list[str]

    def _emit(self, text: str, out: list[str]) -> None:
        """Append visible text, applying the whole-message WS strip as it streams."""
        if not text:
            return
        kept = text.rstrip(WS)
        if kept:
            if not self._started:
                self._started = True
                out.append(kept.lstrip(WS))
            else:
                if self._ws:
                    out.append("".join(self._ws))
                    self._ws.clear()
                out.append(kept)
        if self._started and len(kept) != len(text):
            self._ws.append(text[len(kept):])
