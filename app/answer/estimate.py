"""Token estimates for when the provider sends no usage (or the stream was cut).

Method: one token per 4 bytes of UTF-8, rounded up. For English this is the usual
"4 characters a token" rule; letters with diacritics (2 bytes) and CJK (3 bytes) count for
more, which follows real tokenizers better than counting characters. A chat request adds
a fixed overhead per message (role and separators) and for priming the reply, as the
OpenAI chat format does. The result is an estimate and is always flagged as such."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

BYTES_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4
TOKENS_REPLY_PRIMING = 3


def estimate_text_tokens(text: str) -> int:
    """Estimated tokens of a text: ceil(UTF-8 bytes / 4); 0 for empty text. A lone surrogate
    (possible in a model's raw output) counts 3 bytes, like the U+FFFD it is stored as, instead
    of raising: an estimate must never stop a turn from being stored."""
    return estimate_tokens_of_size(len(text.encode("utf-8", "surrogatepass")))


def estimate_tokens_of_size(utf8_bytes: int) -> int:
    """The same estimate from a size alone: a stream adds its chunks' sizes as they pass
    instead of keeping the text to measure at the end."""
    return -(-utf8_bytes // BYTES_PER_TOKEN)


def estimate_prompt_tokens(messages: Iterable[Mapping[str, str]]) -> int:
    """Estimated prompt tokens of a chat request: each message's text plus overheads."""
    total = TOKENS_REPLY_PRIMING
    for message in messages:
        total += TOKENS_PER_MESSAGE + estimate_text_tokens(message.get("content", ""))
    return total
