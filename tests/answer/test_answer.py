"""The turn core's AnswerStream without a database or a socket: what a client is sent (the
deltas) is exactly what is stored (`content`), for every chunking and every way a stream
ends; and it is the spec's clean text for every public conformance case."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.answer.answer import AnswerStream
from app.answer.events import Delta, TurnFailure
from app.answer.inputs import ProviderUsage, UpstreamChunk
from app.core.cleaning import clean_and_strip_markers
from tests.stream.hostile import any_output, chunkings
from tests.stream.test_conformance import CASES

FAILURE = TurnFailure("upstream_error", "The model server failed (HTTP 500).", 500)


def feed_all(answer: AnswerStream, chunks: list[str]) -> list[Delta]:
    return [d for c in chunks if (d := answer.feed(UpstreamChunk(c))) is not None]


def texts(deltas: list[Delta | None]) -> str:
    return "".join(d.text for d in deltas if d is not None)


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_every_conformance_case_at_random_boundaries(case: dict[str, object]) -> None:
    raw = str(case["input"])
    rng = random.Random(case["id"])
    for _ in range(5):
        cuts = sorted(rng.sample(range(len(raw) + 1), min(len(raw) + 1, rng.randint(0, 8))))
        chunks = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
        answer = AnswerStream()
        deltas: list[Delta | None] = [*feed_all(answer, chunks), answer.end()]
        assert texts(deltas) == answer.content == case["text"], chunks
        assert answer.metadata == case["metadata"]
        assert answer.warning_names == case["warnings"]


@settings(max_examples=800, deadline=None)
@given(data=st.data(), raw=any_output)
def test_streamed_equals_stored_however_the_stream_ends(data: st.DataObject, raw: str) -> None:
    """Completed, failed after the stream opened, or cut by the client (no flush): the
    content to store is the concatenation of what was sent, never more."""
    chunks = data.draw(chunkings(raw))
    ending = data.draw(st.sampled_from(["end", "fail", "cut"]))
    answer = AnswerStream()
    deltas: list[Delta | None] = list(feed_all(answer, chunks))
    if ending == "end":
        deltas.append(answer.end())
    elif ending == "fail":
        deltas.append(answer.fail(FAILURE, flush=True))
    assert texts(deltas) == answer.content
    sent = [d for d in deltas if d is not None]
    assert [d.seq for d in sent] == list(range(1, len(sent) + 1))
    assert all(d.text for d in sent)  # no empty delta reaches a client
    whole = clean_and_strip_markers(raw).text
    if ending == "cut":
        assert whole.startswith(answer.content)
    else:
        assert answer.content == whole


@settings(max_examples=300, deadline=None)
@given(data=st.data(), raw=st.text(alphabet="ab<!-\x00\ud83d\ude00 METADATA:{}>", max_size=60))
def test_text_is_cleaned_before_the_filter_however_it_is_cut(data: st.DataObject, raw: str
                                                              ) -> None:
    """A NUL or a lone surrogate split anywhere: the deltas are storable text, equal to
    cleaning the whole output first, and every change is counted."""
    chunks = data.draw(chunkings(raw))
    answer = AnswerStream()
    sent = texts([*feed_all(answer, chunks), answer.end()])
    assert sent == answer.content == clean_and_strip_markers(raw).text
    assert "\x00" not in sent
    assert answer.sanitized.counts.get("nul_removed", 0) == raw.count("\x00")


def test_status_starts_interrupted_and_follows_the_end() -> None:
    answer = AnswerStream()
    assert answer.status == "interrupted" and answer.failure is None
    answer.feed(UpstreamChunk("Hi <!-- METADATA: {\"a\": 1}"))
    assert answer.fail(FAILURE, flush=False) is None and not answer.filter_closed
    assert (answer.status, answer.failure, answer.content) == ("failed", FAILURE, "Hi")

    done = AnswerStream()
    done.feed(UpstreamChunk("Hi <!-- METADATA: {\"a\": 1} -->"))
    assert done.end() is None and done.filter_closed
    assert (done.status, done.metadata, done.content) == ("complete", {"a": 1}, "Hi")


def test_usage_model_and_finish_reason_come_from_whichever_chunk_carries_them() -> None:
    answer = AnswerStream(keep_raw=True)
    answer.feed(UpstreamChunk("Hé", model="m-1"))
    answer.feed(UpstreamChunk("", finish_reason="stop"))
    answer.feed(UpstreamChunk("", usage=ProviderUsage(3, 2, 5)))
    assert (answer.model, answer.finish_reason, answer.usage) == (
        "m-1", "stop", ProviderUsage(3, 2, 5))
    assert answer.text_chunks == 1 and answer.raw_chunks == ["Hé"]
    assert answer.raw_bytes == len("Hé".encode())
    assert AnswerStream().raw_chunks is None  # kept only when asked for


def test_each_warning_is_taken_once() -> None:
    answer = AnswerStream()
    answer.feed(UpstreamChunk("a <!-- MSG_CONTEXT: {} --> b"))
    [warning] = answer.take_warnings()
    assert warning.kind == "context_echo"
    assert answer.take_warnings() == []
    assert answer.warning_names == ["context_echo"]
