"""The shape of the code that the import contracts cannot see: which modules may know which
database runs, and where a turn's rows are written. A second writer of a turn's rows, or a
service that branches on the database, fails here before it drifts from the first."""

from __future__ import annotations

import re
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"
#: The database kit and the repositories: the only modules whose SQL may differ per database.
REPOSITORIES = ("store/", "turn/rows/")
DATABASE_BRANCH = re.compile(r"backend ==|dialect")
#: What writes a message row, or a turn's llm_calls row.
TURN_WRITE = re.compile(
    r"insert\((_?MESSAGES|Message|_?CALLS|LlmCall)\b|\.add\((Message|LlmCall)\(")


def _modules() -> list[tuple[str, str]]:
    return [(str(path.relative_to(APP)), path.read_text(encoding="utf-8"))
            for path in sorted(APP.rglob("*.py"))]


def _is_repository(name: str) -> bool:
    return name.startswith(REPOSITORIES) or name.endswith("repository.py")


def test_only_repositories_know_which_database_runs() -> None:
    branching = [f"{name}:{number}" for name, text in _modules() if not _is_repository(name)
                 for number, line in enumerate(text.splitlines(), 1)
                 if DATABASE_BRANCH.search(line)]
    assert branching == []


def test_a_turns_rows_are_written_by_the_turn_repository_alone() -> None:
    writers = sorted({name for name, text in _modules() if TURN_WRITE.search(text)})
    assert writers == ["turn/rows/postgres.py", "turn/rows/sqlite.py", "turn/rows/statements.py"]


def test_each_database_has_one_opening_one_finish_and_one_bill() -> None:
    """TurnRows' three writes, each implemented once in each database's module."""
    for name in ("turn/rows/postgres.py", "turn/rows/sqlite.py"):
        text = (APP / name).read_text(encoding="utf-8")
        for method in ("open", "finish", "bill"):
            assert len(re.findall(rf"^    async def {method}\(", text, re.M)) == 1, (name, method)


def test_every_request_body_is_read_by_the_one_parser() -> None:
    """app.api.bodies reads a body (its size cap, its media type, the JSON limits); a handler
    that read one itself would skip them. The demo model server is a server of its own."""
    reading = re.compile(r"request\.(body|json|stream|form)\(")
    readers = sorted(name for name, text in _modules()
                     if reading.search(text) and not name.startswith("demo_llm/"))
    assert readers == ["api/bodies.py"]
