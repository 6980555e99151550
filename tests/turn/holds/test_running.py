"""The registry the fence walks: every running answer is ended once the process is fenced,
and an answer that starts while it is fenced ends as it starts."""

from __future__ import annotations

from app.answer.interruptions import DATABASE_UNREACHABLE
from app.turn.holds.running import RunningAnswers


def test_the_fence_ends_every_running_answer_and_those_that_start_while_fenced() -> None:
    running, ended = RunningAnswers(), []
    running.add("native turn", lambda reason: ended.append(("native turn", reason)))
    running.add("v1 call", lambda reason: ended.append(("v1 call", reason)))
    running.add("finished", lambda reason: ended.append(("finished", reason)))
    running.discard("finished")
    running.fence()
    assert sorted(ended) == [("native turn", DATABASE_UNREACHABLE),
                             ("v1 call", DATABASE_UNREACHABLE)]
    running.add("late", lambda reason: ended.append(("late", reason)))
    assert ended[-1] == ("late", DATABASE_UNREACHABLE)
    running.unfence()
    running.add("after", lambda reason: ended.append(("after", reason)))
    assert len(ended) == 3 and len(running) == 4
