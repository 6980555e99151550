"""Property tests: the reasoning split against the spec's whole-text reading, under hostile
input and any chunking of either channel."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.stream import MarkerFilter
from app.stream.reasoning import ReasoningFormat, ReasoningSplit, split_reasoning
from tests.stream.hostile import FRAGMENTS, any_output, chunkings
from tests.stream.oracle import WS
from tests.stream.reasoning_streaming import reference_split, stream_split
from tests.support.properties import property_settings

MAIN = property_settings(max_examples=1500)
SIDE = property_settings(max_examples=800)

TAGS = ["<think>", "</think>", "<think", "</think", "<thin", "</", "<", "<Think>",
        "<thinking>", "</think >", "<think type=\"x\">", "think>", ">"]
LEAD = st.sampled_from(["", " ", "\n\n", "\r\n", " \t ", "x", "<!-- MSG_CONTEXT: {} -->"])
piece = st.one_of(st.sampled_from(TAGS), st.sampled_from(FRAGMENTS))
free_text = st.lists(piece, max_size=20).map("".join)
shaped = st.tuples(LEAD, st.sampled_from(["<think>", "<think>", "", "<thi"]), free_text,
                   st.sampled_from(["</think>", "</think>", "", "</thi"]), any_output).map(
    "".join)
content_text = st.one_of(shaped, free_text)
field_text = st.one_of(st.just(""), any_output, free_text)
formats = st.sampled_from(["think", "think", "think-prefilled", "none"])


@MAIN
@given(data=st.data(), content=content_text, field=field_text, fmt=formats)
def test_split_matches_the_reference_under_any_chunking(
    data: st.DataObject, content: str, field: str, fmt: ReasoningFormat
) -> None:
    """Chunking, prefix (both channels) and hold-back: stream_split checks them per piece."""
    want = reference_split(content, field, fmt)
    got = stream_split(data.draw(chunkings(content)), data.draw(chunkings(field)),
                       reasoning_format=fmt, expected=want)
    assert (got.text, got.reasoning, got.metadata, got.warnings) == (
        want.text, want.reasoning, want.metadata, want.warnings)


@SIDE
@given(data=st.data(), content=content_text, field=field_text, fmt=formats)
def test_streamed_equals_stored_on_both_channels(
    data: st.DataObject, content: str, field: str, fmt: ReasoningFormat
) -> None:
    streamed = stream_split(data.draw(chunkings(content)), data.draw(chunkings(field)),
                            reasoning_format=fmt)
    stored = split_reasoning(content, field, reasoning_format=fmt)
    assert (streamed.text, streamed.reasoning, streamed.metadata, streamed.warnings) == (
        stored.text, stored.reasoning, stored.metadata, stored.warnings)


@SIDE
@given(data=st.data(), lead=st.sampled_from(["", " ", "\n\n", "\r\n"]), thought=free_text,
       after=content_text)
def test_no_leak_of_the_leading_block(
    data: st.DataObject, lead: str, thought: str, after: str
) -> None:
    """A leading block the spec takes as reasoning never reaches the visible text: what is
    shown, at every point, is a prefix of the text of what follows its first closer."""
    content = f"{lead}<think>{thought}</think>{after}"
    rest = content[content.index("</think>", len(lead)) + len("</think>"):]
    want = reference_split(rest, reasoning_format="none").text
    got = stream_split(data.draw(chunkings(content)))
    shown = ""
    for text in got.text_pieces:
        shown += text
        assert want.startswith(shown)
    assert shown == want


@SIDE
@given(data=st.data(), content=content_text)
def test_a_plain_answer_is_not_delayed(data: st.DataObject, content: str) -> None:
    """Hold-back minimal: while T (after WS) is a prefix of `<think>`, the split holds it and
    nothing else; once it cannot be, the split has shown exactly what a bare MarkerFilter
    fed the same chunks has shown, chunk by chunk."""
    split, bare = ReasoningSplit(), MarkerFilter()
    fed = mine = theirs = ""
    for chunk in data.draw(chunkings(content)):
        fed += chunk
        mine += split.feed(chunk)
        theirs += bare.feed(chunk)
        head = fed.lstrip(WS)
        if head.startswith("<think>"):
            return  # reasoning: the other properties
        if "<think>".startswith(head):
            assert mine == "" and split.held_back == len(head) and not split.decided
        else:
            assert split.decided and not split.in_reasoning
            assert mine == theirs


@SIDE
@given(data=st.data(), content=content_text, field=field_text)
def test_field_deltas_in_any_arrival_order_keep_the_content_untouched(
    data: st.DataObject, content: str, field: str
) -> None:
    """Field deltas interleaved with the content: the content channel is what it is without
    them; when they all come before the content, the reasoning is the one-shot form's."""
    content_chunks = data.draw(chunkings(content))
    field_chunks = data.draw(chunkings(field))
    order = data.draw(st.permutations([0] * len(content_chunks) + [1] * len(field_chunks)))
    split = ReasoningSplit()
    texts, thoughts = [], []
    ci = fi = 0
    for channel in order:
        if channel == 0:
            texts.append(split.feed(content_chunks[ci]))
            ci += 1
        else:
            thoughts.append(split.feed_reasoning(field_chunks[fi]))
            fi += 1
        thoughts.append(split.take_reasoning())
    texts.append(split.close())
    thoughts.append(split.take_reasoning())
    alone = split_reasoning(content)

    def content_warnings(names: list[str]) -> list[str]:
        return [name for name in names if name != "markers_in_reasoning"]

    assert ("".join(texts), split.metadata) == (alone.text, alone.metadata)
    assert content_warnings(split.warnings) == content_warnings(alone.warnings)
    if all(channel == 1 for channel in order[:len(field_chunks)]):
        assert "".join(thoughts) == split_reasoning(content, field).reasoning


@SIDE
@given(data=st.data(), content=content_text, field=field_text, fmt=formats)
def test_feeding_the_feeder_is_feeding_the_split(
    data: st.DataObject, content: str, field: str, fmt: ReasoningFormat
) -> None:
    """`feeder` (the split, then the content filter once T is known to be content) gives
    what `feed` gives, on both channels, wherever the chunks were cut."""
    split = ReasoningSplit(fmt)
    thought = split.feed_reasoning(field)
    text = "".join(split.feeder.feed(chunk) for chunk in data.draw(chunkings(content)))
    text += split.close()
    thought += split.take_reasoning()
    whole = split_reasoning(content, field, reasoning_format=fmt)
    assert (text, thought, split.warnings) == (whole.text, whole.reasoning, whole.warnings)
    assert split.feeder is split.content_filter
