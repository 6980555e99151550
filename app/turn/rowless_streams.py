"""A user's streams that no `streaming` row counts: OpenAI-style calls without a thread.

The stream cap counts a user's `streaming` answer rows, which every process sees. A call
without a thread stores no message, so the process it runs in counts it here instead, and the
cap adds the two. The count is this process's alone: with several workers, a user may hold up
to the cap of such calls in each of them."""

from __future__ import annotations

from collections import Counter


class RowlessStreams:
    def __init__(self) -> None:
        self._open: Counter[str] = Counter()

    def count(self, user_id: str) -> int:
        return self._open[user_id]

    def hold(self, user_id: str) -> StreamHold:
        """Count one more stream of the user's until the hold is released."""
        self._open[user_id] += 1
        return StreamHold(self, user_id)

    def _release(self, user_id: str) -> None:
        self._open[user_id] -= 1
        if self._open[user_id] <= 0:
            del self._open[user_id]


class StreamHold:
    """One counted stream; released once, however many times a finish asks."""

    def __init__(self, streams: RowlessStreams, user_id: str) -> None:
        self._streams: RowlessStreams | None = streams
        self._user_id = user_id

    def release(self) -> None:
        if self._streams is not None:
            self._streams._release(self._user_id)
            self._streams = None
