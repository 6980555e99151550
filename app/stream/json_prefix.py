"""Incremental RFC 8259 check of a JSON object, fed in pieces.

The filter must know, character by character, whether a body can still become a JSON
object, where it completes, and the first position at which it cannot continue. A
pushdown automaton does that without ever looking back; runs of string characters,
white space and digits are skipped with compiled patterns so long bodies cost little.
"""

from __future__ import annotations

import re
from typing import Final

MORE: Final = 0
"""Everything given is a valid, still open prefix of an object."""
COMPLETE: Final = 1
"""The object completed; the position is just after its closing brace."""
INVALID: Final = 2
"""The position is the first character at which no valid object can continue."""

# Automaton states.
_START, _OBJ_OPEN, _KEY, _COLON, _VALUE, _ARR_OPEN, _AFTER = range(7)
_STRING, _ESCAPE, _HEX = range(7, 10)
_MINUS, _ZERO, _INT, _DOT, _FRAC, _EXP_MARK, _EXP_SIGN, _EXP = range(10, 18)
_LITERAL, _DONE, _FAILED = range(18, 21)

_WS: Final = " \t\r\n"
_DIGITS: Final = "0123456789"
_HEX_DIGITS: Final = "0123456789abcdefABCDEF"
_SIMPLE_ESCAPES: Final = '"\\/bfnrt'
_LITERALS: Final = {"t": "true", "f": "false", "n": "null"}

_STRING_RUN = re.compile(r'[^"\\\x00-\x1f]+')

# Accelerators: runs of complete items, `"key": value,` in objects and `value,` in
# arrays, where a value is a scalar or a flat object or array of scalars. Every item
# must end with its comma, or the run with its closing bracket, so a number cut by the
# end of the text is never taken as complete. What they do not match, the automaton
# reads one character at a time.
_W = "[ \t\r\n]*"
_STRING_TOKEN = r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"'
_NUMBER_TOKEN = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_SCALAR = f"(?:{_STRING_TOKEN}|{_NUMBER_TOKEN}|true|false|null)"
_PAIR = f"{_STRING_TOKEN}{_W}:{_W}{_SCALAR}"
_FLAT_OBJECT = f"\\{{{_W}(?:{_PAIR}{_W}(?:,{_W}{_PAIR}{_W})*)?\\}}"
_FLAT_ARRAY = f"\\[{_W}(?:{_SCALAR}{_W}(?:,{_W}{_SCALAR}{_W})*)?\\]"
_VALUE_TOKEN = f"(?:{_SCALAR}|{_FLAT_OBJECT}|{_FLAT_ARRAY})"
_MEMBER = f"{_W}{_STRING_TOKEN}{_W}:{_W}{_VALUE_TOKEN}{_W}"
_ELEMENT = f"{_W}{_VALUE_TOKEN}{_W}"
_MEMBER_RUN = re.compile(f"(?:{_MEMBER},)*(?:{_MEMBER}(}}))?")
_ELEMENT_RUN = re.compile(f"(?:{_ELEMENT},)*(?:{_ELEMENT}(]))?")
_WS_RUN = re.compile(r"[ \t\r\n]+")
_DIGIT_RUN = re.compile(r"[0-9]+")

# States in which white space may be skipped before the next token.
_WS_STATES: Final = frozenset({_OBJ_OPEN, _KEY, _COLON, _VALUE, _ARR_OPEN, _AFTER})
# States that end a number: anything that cannot extend it is handed to _AFTER.
_NUMBER_ENDS: Final = frozenset({_ZERO, _INT, _FRAC, _EXP})


def _items(pattern: re.Pattern[str], text: str, i: int, end: int) -> tuple[int, bool]:
    """End of the run of complete items at i, and whether it closed its container."""
    run = pattern.match(text, i, end)
    if run is None:  # not reached: the patterns match the empty string
        return i, False
    return run.end(), run.group(1) is not None


class JsonObjectPrefix:
    """Validates one JSON object whose text arrives in pieces (see `scan`)."""

    __slots__ = ("_in_key", "_literal", "_literal_pos", "_pending_hex", "_stack", "_state")

    def __init__(self) -> None:
        self._state = _START
        self._stack: list[str] = []
        self._in_key = False
        self._pending_hex = 0
        self._literal = ""
        self._literal_pos = 0

    def scan(self, text: str, i: int, end: int) -> tuple[int, int]:
        """Advance over text[i:end]: (MORE, end), (COMPLETE, q) or (INVALID, p)."""
        state = self._state
        while i < end:
            c = text[i]
            if state == _STRING:
                run = _STRING_RUN.match(text, i, end)
                if run is not None:
                    i = run.end()
                    if i == end:
                        break
                    c = text[i]
                if c == '"':
                    state = _COLON if self._in_key else _AFTER
                elif c == "\\":
                    state = _ESCAPE
                else:
                    return self._fail(i)
                i += 1
            elif state in (_KEY, _OBJ_OPEN) and (items := _items(_MEMBER_RUN, text, i, end))[0] > i:
                i, closed = items
                state = self._pop() if closed else _KEY
                if state == _DONE:
                    return COMPLETE, i
            elif (
                state in (_VALUE, _ARR_OPEN)
                and self._stack[-1] == "["
                and (items := _items(_ELEMENT_RUN, text, i, end))[0] > i
            ):
                i, closed = items
                state = self._pop() if closed else _VALUE
            elif state in _WS_STATES and c in _WS:
                i = _WS_RUN.match(text, i, end).end()  # type: ignore[union-attr]
            elif state in _NUMBER_ENDS:
                state = self._number_tail(state, c)
                if state == _AFTER:
                    continue  # c ends the number: look at it again as what follows a value
                if state in (_INT, _FRAC, _EXP):
                    i = _DIGIT_RUN.match(text, i, end).end()  # type: ignore[union-attr]
                else:
                    i += 1
            else:  # one character at a token boundary or inside a token
                state = self._step(state, c)
                if state == _FAILED:
                    return self._fail(i)
                i += 1
                if state == _DONE:
                    self._state = _DONE
                    return COMPLETE, i
        self._state = state
        return MORE, end

    def _fail(self, i: int) -> tuple[int, int]:
        self._state = _FAILED
        return INVALID, i

    def _after_value(self, c: str) -> int:
        """After a value: a comma, or the bracket that closes the innermost container."""
        if c == ",":
            return _KEY if self._stack[-1] == "{" else _VALUE
        if (c == "}" or c == "]") and self._stack[-1] == ("{" if c == "}" else "["):
            return self._pop()
        return _FAILED

    def _value_start(self, state: int, c: str) -> int:
        """The state after the first character of a value (or _FAILED); in an empty array,
        `]` closes it instead."""
        if c == "]" and state == _ARR_OPEN:
            self._stack.pop()
            return _AFTER
        if c == '"':
            self._in_key = False
            return _STRING
        if c == "{":
            self._stack.append("{")
            return _OBJ_OPEN
        if c == "[":
            self._stack.append("[")
            return _ARR_OPEN
        if c == "-":
            return _MINUS
        if c == "0":
            return _ZERO
        if c in _DIGITS:
            return _INT
        literal = _LITERALS.get(c)
        if literal is None:
            return _FAILED
        self._literal, self._literal_pos = literal, 1
        return _LITERAL

    @staticmethod
    def _number_tail(state: int, c: str) -> int:
        """From a state where the number could end: extend it, or hand c to _AFTER."""
        if c in _DIGITS and state != _ZERO:
            return state
        if c == "." and state in (_ZERO, _INT):
            return _DOT
        if (c == "e" or c == "E") and state != _EXP:
            return _EXP_MARK
        return _AFTER

    def _step(self, state: int, c: str) -> int:
        """The remaining one-character transitions; _FAILED when c cannot continue."""
        if state == _AFTER:
            return self._after_value(c)
        if state in (_VALUE, _ARR_OPEN):
            return self._value_start(state, c)
        if state == _START:
            if c != "{":
                return _FAILED
            self._stack.append("{")
            return _OBJ_OPEN
        if state in (_OBJ_OPEN, _KEY):
            if c == '"':
                self._in_key = True
                return _STRING
            if c == "}" and state == _OBJ_OPEN:
                return self._pop()
            return _FAILED
        if state == _COLON:
            return _VALUE if c == ":" else _FAILED
        if state == _ESCAPE:
            if c == "u":
                self._pending_hex = 4
                return _HEX
            return _STRING if c in _SIMPLE_ESCAPES else _FAILED
        if state == _HEX:
            if c not in _HEX_DIGITS:
                return _FAILED
            self._pending_hex -= 1
            return _HEX if self._pending_hex else _STRING
        if state == _MINUS:
            return _FAILED if c not in _DIGITS else (_ZERO if c == "0" else _INT)
        if state == _DOT:
            return _FRAC if c in _DIGITS else _FAILED
        if state == _EXP_MARK:
            if c == "+" or c == "-":
                return _EXP_SIGN
            return _EXP if c in _DIGITS else _FAILED
        if state == _EXP_SIGN:
            return _EXP if c in _DIGITS else _FAILED
        if state == _LITERAL:
            if c != self._literal[self._literal_pos]:
                return _FAILED
            self._literal_pos += 1
            return _LITERAL if self._literal_pos < len(self._literal) else _AFTER
        return _FAILED  # _DONE or _FAILED: nothing may follow

    def _pop(self) -> int:
        """Close the innermost container: the whole object is done, or a value ended."""
        self._stack.pop()
        if self._stack:
            return _AFTER
        self._state = _DONE
        return _DONE
