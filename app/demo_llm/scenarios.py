"""What the demo model says: the scenario a user message asks for and the exact deltas it emits.

Pure data and functions (no I/O, no asyncio) so the documented outputs in
docs/demo_scenarios.md can be checked without a server. The HTTP shell is server.py.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from app.stream import strip_markers

FinishReason = Literal["stop", "length", "tool_calls"]
Awaiting = Literal["question", "decision", "task"]

#: Scenarios that decide the whole shape of the answer (the first one found wins).
SHAPES = (
    "seed-bug", "no-closer", "split-markers", "echo-context", "truncated", "error-mid",
    "error-before", "long", "garbled", "html", "no-metadata", "empty", "cut-clean",
    "bad-chunk", "think", "think-prefilled", "think-field", "think-unclosed", "think-markers",
    "code",
    "tool-call-inline", "tool-calls-inline", "think-tool-call", "tool-call-truncated",
)
#: Keywords that combine with any shape.
MODIFIERS = ("no-usage", "slow-first", "title-error")

_KEYWORD = re.compile(
    r"\[("
    + "|".join(re.escape(k) for k in (*SHAPES, *MODIFIERS))
    + r"|awaiting:(?:question|decision|task))\]",
    re.IGNORECASE,
)
_CONTEXT_HEADER = re.compile(r"\A[ \t\r\n]*<!--[ \t\r\n]*MSG_CONTEXT[ \t\r\n]*:?[ \t\r\n]*", re.I)
_CLOSER = re.compile(r"[ \t\r\n]*-{2,10}>[ \t\r\n]?")
_ECHO_FALLBACK = '<!-- MSG_CONTEXT: {"history": []} -->'
_AWAITING_CLOSING_LINE = {
    None: "Ask me anything else.",
    "question": "Would you like me to go into more detail?",
    "decision": "Should I go with option A or option B?",
    "task": "Please run the command and tell me what it prints.",
}
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class ChatInput:
    """The parts of a chat request the demo model looks at."""

    system: str
    user_text: str
    """The last user message without its leading MSG_CONTEXT block."""
    context_block: str | None = None
    """The leading MSG_CONTEXT block exactly as received (for echo scenarios)."""


@dataclass(frozen=True)
class Reply:
    """One planned answer: the content deltas in order and how the stream behaves."""

    scenario: str
    pieces: tuple[str, ...]
    finish_reason: FinishReason = "stop"
    send_usage: bool = True
    slow_first: bool = False
    abort_after: int | None = None
    """Close the connection abruptly after sending this many pieces."""
    cut_after: int | None = None
    """End the body cleanly after this many pieces: no finish chunk, no usage, no [DONE]
    (what a proxy that drops the rest of an answer sends)."""
    bad_chunk_after: int | None = None
    """After this many pieces send one chunk whose `content` is a number, then go on."""
    http_error: int | None = None
    """Answer with this HTTP status and an OpenAI error body before any token."""
    error_message: str = ""
    modifiers: frozenset[str] = field(default_factory=frozenset)
    reasoning_pieces: tuple[str, ...] = ()
    """Thinking sent in `delta.reasoning_content` deltas before any content ([think-field])."""
    thinking_pieces: int = 0
    """How many of the leading `pieces` are the model's inline thinking: paced as thinking
    (slower, so a page shows "Thinking…" a moment) and counted as reasoning tokens."""

    @property
    def text(self) -> str:
        """What the model emits when the stream runs to its end."""
        return "".join(self.pieces)

    @property
    def reasoning(self) -> str:
        """The reasoning field's text (`reasoning_content`), empty for most scenarios."""
        return "".join(self.reasoning_pieces)

    @property
    def thinks(self) -> bool:
        """Whether the model thinks in this answer (its usage then reports reasoning tokens)."""
        return bool(self.reasoning_pieces) or self.thinking_pieces > 0

    def thinking_sent(self, content_pieces: int) -> str:
        """The thinking among what was sent, when `content_pieces` content pieces were: what
        its reasoning tokens count."""
        return self.reasoning + "".join(self.pieces[:min(content_pieces,
                                                           self.thinking_pieces)])


def count_tokens(text: str) -> int:
    """Deterministic stand-in for a tokenizer: one token per 4 characters, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def prompt_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """count_tokens of every message's text plus 3 tokens of per-message overhead."""
    return sum(count_tokens(message_text(m)) + 3 for m in messages)


def message_text(message: Mapping[str, Any]) -> str:
    """A message's content as text (string content, or the text parts of a parts list)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def split_context(content: str) -> tuple[str | None, str]:
    """Split a user message into its leading MSG_CONTEXT block (verbatim) and the user's text."""
    header = _CONTEXT_HEADER.match(content)
    if header is None:
        return None, content
    try:
        _, body_end = json.JSONDecoder().raw_decode(content, header.end())
    except ValueError:
        return None, content
    closer = _CLOSER.match(content, body_end)
    if closer is None:
        return None, content
    block = content[header.start():closer.end()].strip()
    return block, content[closer.end():]


def chat_input(messages: Sequence[Mapping[str, Any]]) -> ChatInput:
    """Extract the system prompt and the last user message from an OpenAI messages list."""
    system = "\n".join(
        message_text(m) for m in messages if m.get("role") in ("system", "developer")
    )
    users = [message_text(m) for m in messages if m.get("role") == "user"]
    block, text = split_context(users[-1] if users else "")
    return ChatInput(system=system, user_text=text, context_block=block)


def keywords(user_text: str) -> list[str]:
    """The scenario keywords in a user's text, lower-cased, in order."""
    return [m.group(1).lower() for m in _KEYWORD.finditer(user_text)]


def topic(user_text: str, max_words: int = 8) -> str:
    """A short, marker-free quote of the user's text: keywords removed, no `<` or `>`."""
    cleaned = _KEYWORD.sub(" ", user_text).replace("<", " ").replace(">", " ")
    words = cleaned.split()
    quote = " ".join(words[:max_words])
    return quote + ("…" if len(words) > max_words else "")


def chunk_text(text: str, seed: str) -> list[str]:
    """Cut text into token-sized pieces of 1 to 6 characters, the same way for the same seed."""
    rng = random.Random(seed)
    pieces: list[str] = []
    i = 0
    while i < len(text):
        size = rng.randint(1, 6)
        pieces.append(text[i:i + size])
        i += size
    return pieces


def metadata_comment(metadata: Mapping[str, Any], closer: bool = True) -> str:
    """`<!-- METADATA: {...} -->`, or without the closer (the seed bug)."""
    body = json.dumps(dict(metadata), ensure_ascii=False)
    return f"<!-- METADATA: {body}" + (" -->" if closer else "")


def plan_reply(chat: ChatInput) -> Reply:
    """The streamed answer to a chat request: the scenario and its exact deltas."""
    found = keywords(chat.user_text)
    shape = next((k for k in found if k in SHAPES), "default")
    awaiting = _awaiting(found)
    mods = frozenset(k for k in found if k in MODIFIERS)
    reply = _SHAPE_BUILDERS[shape](chat, awaiting)
    return replace(
        reply,
        modifiers=mods,
        send_usage="no-usage" not in mods,
        slow_first="slow-first" in mods,
    )


def apply_max_tokens(reply: Reply, max_tokens: int | None) -> Reply:
    """Cut the answer where a real model would stop: at max_tokens, finish_reason `length`."""
    if max_tokens is None or count_tokens(reply.text) <= max_tokens:
        return reply
    budget = max_tokens * CHARS_PER_TOKEN
    kept: list[str] = []
    for piece in reply.pieces:
        if budget <= 0:
            break
        kept.append(piece[:budget])
        budget -= len(piece)
    return replace(reply, pieces=tuple(kept), finish_reason="length")


def continued_from(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The partial answer a request asks to continue (the gateway's continuation: the
    original messages, the partial answer as an assistant message, then system text), or
    None for an ordinary request."""
    if len(messages) < 2 or messages[-1].get("role") != "system":
        return None
    partial = messages[-2]
    return message_text(partial) if partial.get("role") == "assistant" else None


def continue_reply(reply: Reply, said: str) -> Reply:
    """The rest of `reply` after the clean text `said`: its raw text from the shortest
    prefix whose clean text is `said` (what a model that goes on exactly where it was cut
    would write), cut into pieces again. A `said` that is no clean prefix of the answer
    gets the whole answer (a model that starts over). The failure a scenario plans (an
    abort, a cut) is not repeated by the continuation."""
    raw = reply.text
    start = next((k for k in range(len(raw) + 1) if strip_markers(raw[:k]).text == said), 0)
    rest = raw[start:]
    return replace(reply, scenario=reply.scenario + "+continued",
                   pieces=tuple(chunk_text(rest, said)), abort_after=None, cut_after=None,
                   bad_chunk_after=None)


def plan_completion(chat: ChatInput) -> Reply:
    """The non-streamed answer: a title, a summary, or the chat answer in one piece."""
    lowered = chat.system.lower()
    auxiliary = "title" in lowered or "summar" in lowered
    if auxiliary and "title-error" in keywords(chat.user_text):
        return _http_error("title-error", 500, "The demo model refused the title/summary call.")
    if "title" in lowered:
        return Reply(scenario="title", pieces=(make_title(chat.user_text),))
    if "summar" in lowered:
        return Reply(scenario="summary", pieces=(make_summary(chat.user_text),))
    reply = plan_reply(chat)
    if reply.thinks:  # its pieces tell the thinking from the answer
        return replace(reply, abort_after=None)
    return replace(reply, pieces=(reply.text,), abort_after=None)


def make_title(user_text: str) -> str:
    """A few capitalised words from the user's text, or a generic title."""
    words = topic(user_text, max_words=6).rstrip("…").split()
    words = [w.strip(".,;:!?\"'()[]{}") for w in words]
    title = " ".join(w for w in words if w)[:60].strip()
    return title[:1].upper() + title[1:] if title else "New conversation"


def make_summary(user_text: str) -> str:
    """One sentence naming what the conversation is about."""
    about = topic(user_text, max_words=16) or "nothing in particular yet"
    return f"The conversation so far is about: {about}"


def _awaiting(found: Sequence[str]) -> Awaiting | None:
    for k in found:
        if k.startswith("awaiting:"):
            value = k.split(":", 1)[1]
            if value == "question":
                return "question"
            if value == "decision":
                return "decision"
            return "task"
    return None


def _metadata(awaiting: Awaiting | None, language: str = "en") -> dict[str, Any]:
    return {"language": language, "sources": [], "awaiting": awaiting}


def answer_text(chat: ChatInput, awaiting: Awaiting | None) -> str:
    """The plausible markdown answer every ordinary scenario starts with."""
    quote = topic(chat.user_text) or "your message"
    said = " ".join(_KEYWORD.sub(" ", chat.user_text).split())
    words = len(said.split())
    return (
        f"Here is what I can tell you about **{quote}**.\n\n"
        f"- This answer comes from the Chatgate demo model, not a real language model.\n"
        f"- Your message had {words} word{'' if words == 1 else 's'} "
        f"and {len(said)} characters.\n"
        f"- It streams in small pieces, the way a real model's tokens arrive.\n\n"
        f"{_AWAITING_CLOSING_LINE[awaiting]}"
    )


def _normal(chat: ChatInput, awaiting: Awaiting | None, scenario: str = "default") -> Reply:
    text = answer_text(chat, awaiting) + "\n\n" + metadata_comment(_metadata(awaiting))
    return Reply(scenario=scenario, pieces=tuple(chunk_text(text, chat.user_text)))


def _seed_bug(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    meta: dict[str, Any] = {"language": "cs"}
    if awaiting is not None:
        meta["awaiting"] = awaiting
    quote = topic(chat.user_text) or "vaši zprávu"
    first = (chat.context_block or _ECHO_FALLBACK) + "\n" + metadata_comment(meta, closer=False)
    first += "Aha, chápu."
    rest = (
        f" Tohle je ukázková odpověď demo modelu na „{quote}“.\n\n"
        "- První bod: odpověď přichází po malých kouscích.\n"
        "- Druhý bod: značky na začátku musí brána odstranit.\n\n"
        "Stačí to takhle?"
    )
    return Reply(scenario="seed-bug", pieces=(first, *chunk_text(rest, chat.user_text)))


def _no_closer(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    text = answer_text(chat, awaiting) + "\n\n" + metadata_comment(_metadata(awaiting), False)
    return Reply(scenario="no-closer", pieces=tuple(chunk_text(text, chat.user_text)))


def _split_markers(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    meta = json.dumps(_metadata(awaiting))
    cut_a, cut_b = len(meta) // 3, 2 * len(meta) // 3
    context = (
        "<!", "--", " MS", "G_CONT", "EXT", " ", ":", " ", '{"hist', 'ory": [', "]", "}",
        " -", "-", ">", "\n",
    )
    answer = tuple(chunk_text(answer_text(chat, awaiting), chat.user_text))
    metadata = (
        "\n\n<", "!-", "-", " META", "DATA", " ", ":", " ", meta[:cut_a], meta[cut_a:cut_b],
        meta[cut_b:], " -", "-", ">",
    )
    return Reply(scenario="split-markers", pieces=(*context, *answer, *metadata))


def _echo_context(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    echo = (chat.context_block or _ECHO_FALLBACK) + "\n"
    normal = _normal(chat, awaiting)
    return Reply(scenario="echo-context", pieces=(echo, *normal.pieces))


def _truncated(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    full = metadata_comment(_metadata(awaiting))
    text = answer_text(chat, awaiting) + "\n\n" + full[: full.index('"sources"') + 5]
    return Reply(scenario="truncated", pieces=tuple(chunk_text(text, chat.user_text)),
                 finish_reason="length")


def _error_mid(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    normal = _normal(chat, awaiting)
    return replace(normal, scenario="error-mid", abort_after=len(normal.pieces) // 2)


def _cut_clean(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    normal = _normal(chat, awaiting)
    return replace(normal, scenario="cut-clean", cut_after=len(normal.pieces) // 2)


def _bad_chunk(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    normal = _normal(chat, awaiting)
    return replace(normal, scenario="bad-chunk", bad_chunk_after=len(normal.pieces) // 2)


def _error_before(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    return _http_error("error-before", 500, "The demo model failed before the first token.")


def _http_error(scenario: str, status: int, message: str) -> Reply:
    return Reply(scenario=scenario, pieces=(), http_error=status, error_message=message)


LONG_LINES = 40


def long_answer_text() -> str:
    """Forty numbered lines (~3,000 characters), so a cut is easy to see."""
    return "\n".join(
        f"Line {n:02d} of the long demo answer: the quick brown fox jumps over the lazy dog."
        for n in range(1, LONG_LINES + 1)
    )


def _long(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    text = long_answer_text() + "\n\n" + metadata_comment(_metadata(awaiting))
    return Reply(scenario="long", pieces=tuple(chunk_text(text, chat.user_text)))


def _garbled(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    text = "<!-- METADATA: language=cs -->Aha, rozumím. " + answer_text(chat, awaiting)
    return Reply(scenario="garbled", pieces=tuple(chunk_text(text, chat.user_text)))


HTML_ANSWER = (
    "Markup must show as text: <b>bold</b> & <i>italic</i>, "
    '<img src="x" onerror="window.__demoXss=1">, '
    "<script>window.__demoXss=1</script> and a [link](javascript:alert(1))."
)


def _html(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    text = HTML_ANSWER + "\n\n" + metadata_comment(_metadata(awaiting))
    return Reply(scenario="html", pieces=tuple(chunk_text(text, chat.user_text)))


#: `[code]`: fenced blocks in two languages, so a page's code rendering, its highlighting
#: and its Copy button can be tried without a real model. The `<` and `>` of the code are
#: text the page must show as written.
CODE_ANSWER = (
    "Here is the same check in two languages.\n\n"
    "Python:\n\n"
    "```python\n"
    "def is_even(n: int) -> bool:\n"
    "    \"\"\"True when n divides by 2.\"\"\"\n"
    "    return n % 2 == 0\n"
    "\n"
    "print([n for n in range(10) if is_even(n)])\n"
    "```\n\n"
    "JavaScript:\n\n"
    "```javascript\n"
    "const isEven = (n) => n % 2 === 0;\n"
    "console.log([...Array(10).keys()].filter((n) => isEven(n) && n < 10));\n"
    "```\n\n"
    "Both print `[0, 2, 4, 6, 8]`."
)


def _code(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    text = CODE_ANSWER + "\n\n" + metadata_comment(_metadata(awaiting))
    return Reply(scenario="code", pieces=tuple(chunk_text(text, chat.user_text)))


def _no_metadata(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    return Reply(scenario="no-metadata",
                 pieces=tuple(chunk_text(answer_text(chat, awaiting), chat.user_text)))


def _empty(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    return Reply(scenario="empty", pieces=(metadata_comment(_metadata(awaiting)),))


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
#: The METADATA a draft inside the thinking of `[think-markers]` writes: discarded, it is
#: not the answer's.
DRAFT_METADATA = {"language": "de"}


def thinking_text(chat: ChatInput) -> str:
    """What the demo model thinks before it answers (markdown, as real models' thinking is)."""
    quote = topic(chat.user_text) or "your message"
    return (
        f"The user asks about **{quote}**. I am the demo model, so my plan is:\n"
        "- say that the answer comes from the demo model;\n"
        "- count the words and characters of the message;\n"
        "- end with the closing line."
    )


def _thinking_then_answer(chat: ChatInput, awaiting: Awaiting | None, scenario: str,
                          thinking: str) -> Reply:
    """The inline `thinking` block in pieces (its last piece ends it), then the default
    answer in pieces."""
    block = tuple(chunk_text(thinking, chat.user_text + "/thinking"))
    answer = _normal(chat, awaiting).pieces
    return Reply(scenario=scenario, pieces=(*block, *answer), thinking_pieces=len(block))


def _think(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    thinking = f"{THINK_OPEN}\n{thinking_text(chat)}\n{THINK_CLOSE}\n\n"
    return _thinking_then_answer(chat, awaiting, "think", thinking)


def _think_prefilled(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    thinking = f"{thinking_text(chat)}\n{THINK_CLOSE}\n\n"
    return _thinking_then_answer(chat, awaiting, "think-prefilled", thinking)


def _think_markers(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    draft = (f"Draft: {metadata_comment(DRAFT_METADATA)} no, the answer is in English."
             "\n")
    thinking = f"{THINK_OPEN}\n{draft}{thinking_text(chat)}\n{THINK_CLOSE}\n\n"
    return _thinking_then_answer(chat, awaiting, "think-markers", thinking)


def _think_unclosed(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    thinking = f"{THINK_OPEN}\n{thinking_text(chat)}"
    block = tuple(chunk_text(thinking, chat.user_text + "/thinking"))
    return Reply(scenario="think-unclosed", pieces=block, thinking_pieces=len(block))


def _think_field(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    normal = _normal(chat, awaiting, "think-field")
    return replace(normal, reasoning_pieces=tuple(
        chunk_text(thinking_text(chat), chat.user_text + "/thinking")))


TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
#: The calls the `[…tool-call…]` scenarios write into their text, as Hermes and Qwen do
#: behind a server without a tool parser (marker spec, "Inline tool calls").
WEATHER_CALL = {"name": "get_weather", "arguments": {"city": "Prague", "unit": "celsius"}}
TIME_CALL = {"name": "get_time", "arguments": {"zone": "Europe/Prague"}}


def inline_call(call: Mapping[str, Any]) -> str:
    """One call as the model writes it: its JSON on a line of its own between the tags."""
    return f"{TOOL_OPEN}\n{json.dumps(call, ensure_ascii=False)}\n{TOOL_CLOSE}"


def _calling(chat: ChatInput, scenario: str, text: str, thinking: str = "") -> Reply:
    block = tuple(chunk_text(thinking, chat.user_text + "/thinking")) if thinking else ()
    return Reply(scenario=scenario, pieces=(*block, *chunk_text(text, chat.user_text)),
                 thinking_pieces=len(block))


def _tool_call_inline(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    return _calling(chat, "tool-call-inline",
                    "Let me check the weather.\n" + inline_call(WEATHER_CALL))


def _tool_calls_inline(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    return _calling(chat, "tool-calls-inline",
                    inline_call(WEATHER_CALL) + "\n" + inline_call(TIME_CALL))


def _think_tool_call(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    thinking = f"{THINK_OPEN}\nI need the weather in Prague first.\n{THINK_CLOSE}\n\n"
    return _calling(chat, "think-tool-call", inline_call(WEATHER_CALL), thinking)


def _tool_call_truncated(chat: ChatInput, awaiting: Awaiting | None) -> Reply:
    """The answer stops inside the call's arguments (max_tokens reached)."""
    call = inline_call(WEATHER_CALL)
    reply = _calling(chat, "tool-call-truncated",
                     "On it. " + call[: call.index('"unit"')])
    return replace(reply, finish_reason="length")


_SHAPE_BUILDERS: dict[str, Callable[[ChatInput, Awaiting | None], Reply]] = {
    "default": _normal,
    "seed-bug": _seed_bug,
    "no-closer": _no_closer,
    "split-markers": _split_markers,
    "echo-context": _echo_context,
    "truncated": _truncated,
    "error-mid": _error_mid,
    "cut-clean": _cut_clean,
    "bad-chunk": _bad_chunk,
    "error-before": _error_before,
    "long": _long,
    "garbled": _garbled,
    "html": _html,
    "code": _code,
    "no-metadata": _no_metadata,
    "empty": _empty,
    "think": _think,
    "think-prefilled": _think_prefilled,
    "think-field": _think_field,
    "think-unclosed": _think_unclosed,
    "think-markers": _think_markers,
    "tool-call-inline": _tool_call_inline,
    "tool-calls-inline": _tool_calls_inline,
    "think-tool-call": _think_tool_call,
    "tool-call-truncated": _tool_call_truncated,
}
