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


#: The figures of a message that add up over the calls of an answer continued in place.
SUMMED = ("tokens", "prompt_tokens", "completion_tokens")


def cut_short(status: str, metadata: Mapping[str, Any]) -> bool:
    """Whether a stored answer may be finished in place by Continue: it was interrupted, or
    it ended complete only because it reached its token limit (finish_reason `length`)."""
    if status == "interrupted":
        return True
    stream = metadata.get("stream")
    return (status == "complete" and isinstance(stream, Mapping)
            and stream.get("finish_reason") == "length")


def continued_metadata(earlier: Mapping[str, Any], now: Mapping[str, Any]
                       ) -> dict[str, Any]:
    """What an answer continued in place says of all its calls: `now` (the continuation's
    totals and processingDetails) with the earlier answer's figures added, its calls listed
    first, and how many times it was continued. The earlier calls' own rows were billed
    with the earlier finish; only the message's figures are summed here."""
    out: dict[str, Any] = {k: now[k] for k in (*SUMMED, "cost_usd") if k in now}
    for key in SUMMED:
        out[key] = int(earlier.get(key) or 0) + int(now.get(key) or 0)
    before, after = earlier.get("cost_usd"), now.get("cost_usd")
    out["cost_usd"] = (None if before is None or after is None
                       else round(float(before) + float(after), 8))
    details = dict(now.get("processingDetails") or {})
    old = earlier.get("processingDetails")
    old_calls = old.get("llm_calls") if isinstance(old, Mapping) else None
    details["llm_calls"] = [*(old_calls or []), *details.get("llm_calls", [])]
    out["processingDetails"] = details
    out["continued"] = int(earlier.get("continued") or 0) + 1
    old_meta = earlier.get("response_metadata")
    if isinstance(old_meta, Mapping) and old_meta:
        out["response_metadata"] = {**old_meta, **(now.get("response_metadata") or {})}
    return out
