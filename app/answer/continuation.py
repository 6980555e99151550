"""Finishing an answer whose model server failed mid-answer: the request that asks a model
to continue it. The model sees the original messages, the clean text said so far as its own
partial answer, and one short instruction; its text is appended through a fresh filter
(AnswerStream.reopen), so the client reads one answer with no gap and no repeat."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: Errors after which another call may finish the answer: the stream was cut, stalled past
#: the read timeout, or the server said it failed. A request the server refused, an answer
#: past its deadline or one the gateway cannot read is not continued.
CONTINUABLE = frozenset({"upstream_truncated", "upstream_timeout", "upstream_unavailable",
                         "upstream_error"})

CONTINUE_INSTRUCTION = (
    "Your previous answer above was cut off. Continue it exactly where it stopped: do not "
    "repeat any of it, do not start over, do not comment on the interruption; write only "
    "the rest, including the METADATA comment at the end if it is still missing."
)


def continuable(code: str, http_status: int | None) -> bool:
    """Whether a mid-answer failure with this code and status may be continued."""
    if code not in CONTINUABLE:
        return False
    return http_status is None or http_status in (408, 409, 429) or http_status >= 500


def continuation_messages(messages: Sequence[Mapping[str, Any]], said: str
                          ) -> list[dict[str, Any]]:
    """The original request, the partial answer, the instruction. Nothing said yet: the
    original request alone (a fresh try)."""
    out = [dict(m) for m in messages]
    if said:
        out += [{"role": "assistant", "content": said},
                {"role": "system", "content": CONTINUE_INSTRUCTION}]
    return out
