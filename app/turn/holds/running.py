"""Every answer this process runs now, whatever API runs it (the native turn, an
OpenAI-style or Anthropic-style call): the fence (app.process) ends them all at once.

A process cut off from the database cannot be told from a dead one, so before another may
take its threads over it ends its own answers (app.config.fencing). Each answer run
(app.turn.run.answer_run) is here from its start to the end of its finish, with how its
driver ends it (the native turn's task, a `/v1` stream's response, a whole call's wait):
one walk over this registry reaches them all, and an answer started while fenced ends as
it starts."""

from __future__ import annotations

from collections.abc import Callable

from app.answer.interruptions import DATABASE_UNREACHABLE


class RunningAnswers:
    """The running answers of this process, each with how it is ended (given a reason of
    app.answer.interruptions)."""

    def __init__(self) -> None:
        self._ends: dict[object, Callable[[str], None]] = {}
        #: The heartbeat lease ran out unrenewed: every answer ends, new ones as they start.
        self.fenced = False

    def add(self, answer: object, end: Callable[[str], None]) -> None:
        self._ends[answer] = end
        if self.fenced:
            end(DATABASE_UNREACHABLE)

    def discard(self, answer: object) -> None:
        self._ends.pop(answer, None)

    def __len__(self) -> int:
        return len(self._ends)

    def fence(self) -> None:
        """This process's heartbeat lease ran out (app.process): every answer it runs ends
        now, `interrupted` (`database_unreachable`), its client told before its row is
        stored, and any started until `unfence` ends as it starts."""
        self.fenced = True
        for end in list(self._ends.values()):
            end(DATABASE_UNREACHABLE)

    def unfence(self) -> None:
        self.fenced = False
