"""How many tokens the calls a turn admission lets in may spend: a key's daily token budget
is checked when a turn opens, and the answer would then run to its model's own limit, past
the budget by a whole answer. The gate says what the budget has left while it opens a turn
(native or OpenAI-style alike, without knowing either's type); the turn's model calls,
made inside that opening, cap every request's `max_tokens` at it (app.turn.run.model_calls).
A budget is then overshot by at most the prompt of the turn that reached it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_ALLOWANCE: ContextVar[int | None] = ContextVar("chatgate_token_allowance", default=None)


@contextmanager
def token_allowance(tokens: int | None) -> Iterator[None]:
    """Calls opened inside the block may spend at most `tokens` (None: no cap)."""
    token = _ALLOWANCE.set(tokens)
    try:
        yield
    finally:
        _ALLOWANCE.reset(token)


def current_allowance() -> int | None:
    """The cap of the admission a call is opened under, if any."""
    return _ALLOWANCE.get()
