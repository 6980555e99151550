"""The shape of the code that the import contracts cannot see: which modules may know which
database runs, and where a turn's rows are written. A second writer of a turn's rows (an
insert, an update or a delete), or a module outside the database kit that branches on the
database, fails here before it drifts from the first."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[1] / "app"
#: The database kit (app.config.database_urls reads a URL's scheme for it) and the turn's
#: repository: the only modules that may know which database runs. A statement that differs
#: per database is written in one of them (app.store.per_database offers the choice).
DATABASE_KIT = ("store/", "turn/rows/", "config/database_urls.py")
DATABASE_BRANCH = re.compile(
    r"""backend\s*[=!]=|dialect|get_backend_name|["'](postgresql|sqlite)["']""")
#: The owners of the messages and llm_calls rows: the turn's repository, and the repair's,
#: which rewrites stored messages (with backups) by design.
TURN_ROW_OWNERS = ("turn/rows/", "repair/repository.py")
#: The names a turn's rows go by: the models, the tables (app.turn.rows.statements).
_TURN_TABLES = {"Message", "LlmCall", "MESSAGES", "CALLS"}
_TABLE_ALIAS = re.compile(r"^\s*(\w+(?:\s*,\s*\w+)*)\s*(?::\s*\w+\s*)?=\s*(.+)$", re.M)
_TABLE_OF = re.compile(r"(table_of\((Message|LlmCall)\)?|(Message|LlmCall)\.__table__)\b.*")
_RAW_WRITE = re.compile(r"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?(messages|llm_calls)\b")


def _modules() -> list[tuple[str, str]]:
    return [(str(path.relative_to(APP)), path.read_text(encoding="utf-8"))
            for path in sorted(APP.rglob("*.py"))]


def _turn_table_names(text: str) -> set[str]:
    """The models and tables of a turn's rows, and every module-level name bound to one
    (`_MESSAGES = table_of(Message)`, `_THREADS, _MESSAGES = table_of(Thread), ...`,
    `_MESSAGES: Table = Message.__table__`)."""
    names = set(_TURN_TABLES)
    for targets, values in _TABLE_ALIAS.findall(text):
        parts = [part.strip() for part in values.split("),")]
        for target, value in zip(targets.split(","), parts, strict=False):
            if _TABLE_OF.fullmatch(value.strip()):
                names.add(target.strip())
    return names


def writes_turn_rows(text: str) -> bool:
    """`text` inserts, updates or deletes messages or llm_calls rows: a Core statement on
    their table or model, an ORM object added, changed or deleted, or SQL of its own."""
    names = "|".join(sorted(_turn_table_names(text)))
    statement = re.compile(rf"\b(insert|update|delete)\(\s*({names})\b")
    orm = re.compile(r"\.add(_all)?\(\s*(Message|LlmCall)\(|\.delete\(\s*(message|call)\b"
                     r"|\bmessage\.\w+\s*=(?!=)")
    return bool(statement.search(text) or orm.search(text) or _RAW_WRITE.search(text))


def test_only_the_database_kit_knows_which_database_runs() -> None:
    """No repository, service or handler branches on the database: a statement that differs
    per database is in the kit (app.store.per_database) or the turn's repository."""
    branching = [f"{name}:{number}" for name, text in _modules()
                 if not name.startswith(DATABASE_KIT)
                 for number, line in enumerate(text.splitlines(), 1)
                 if DATABASE_BRANCH.search(line)]
    assert branching == []


def test_the_database_rule_covers_every_repository() -> None:
    """Every repository is held to the rule: none is exempt but the kit's own, and the rule
    finds the branches it is meant to."""
    repositories = [name for name, _ in _modules() if name.endswith("repository.py")]
    assert len(repositories) >= 10, repositories
    assert [name for name in repositories if name.startswith(DATABASE_KIT)] == []
    for branch in ('if s.get_bind().dialect.name == "postgresql":', "backend == 'sqlite'",
                   "from sqlalchemy.dialects import postgresql", "dialect_of(s)"):
        assert DATABASE_BRANCH.search(branch), branch


def test_a_turns_rows_are_written_by_their_owners_alone() -> None:
    writers = sorted(name for name, text in _modules() if writes_turn_rows(text))
    assert [name for name in writers if not name.startswith(TURN_ROW_OWNERS)] == []
    assert "repair/repository.py" in writers
    assert {"turn/rows/postgres.py", "turn/rows/sqlite.py", "turn/rows/statements.py",
            "turn/rows/messages.py", "turn/rows/sweeps.py"} <= set(writers)


@pytest.mark.parametrize("write", [
    "s.add(Message(id=uuid.uuid4()))", "await s.execute(insert(LlmCall).values(x=1))",
    "await s.execute(update(Message).where(Message.id == i))",
    "await s.execute(delete(Message).where(later))",
    "_MESSAGES = table_of(Message)\nawait s.execute(update(_MESSAGES).values(meta={}))",
    "_THREADS, _CALLS_T = table_of(Thread), table_of(LlmCall)\ns.execute(delete(_CALLS_T))",
    "await s.delete(message)", "message.meta = {**message.meta, 'x': 1}",
    "_MESSAGES: Table = Message.__table__  # type: ignore\nupdate(_MESSAGES)",
    'text("UPDATE messages SET content = :c")',
    'text("DELETE FROM llm_calls WHERE id = :i")',
])
def test_every_kind_of_write_is_seen(write: str) -> None:
    assert writes_turn_rows(write)


def test_reads_and_other_tables_are_not_writes() -> None:
    for text in ("select(Message).where(Message.id == i)", "update(Thread).values(x=1)",
                 "delete(GatewayProcess)", "s.add(Thread(id=i))", "insert(OPEN_CALLS)",
                 "m = table_of(Message).c\nselect(m.id)", "if message.role == 'user':"):
        assert not writes_turn_rows(text), text


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


# ---------- rooms: app/ opens on its domains, a module's name says one thing ----------

#: The names a domain folder repeats by pattern: its handlers, service, repository, errors,
#: models, and a repository's contract and per-database modules.
PATTERN_NAMES = {"__init__.py", "endpoints.py", "service.py", "repository.py", "errors.py",
                 "models.py", "contract.py", "postgres.py", "sqlite.py"}
#: The most modules app/turn keeps at its top level; the rest live in the rooms of a turn's
#: life (admission, holds, run, native, openai, anthropic, stored, observers, rows).
TURN_TOP_LEVEL_AT_MOST = 12


def test_app_opens_on_its_domains() -> None:
    """No loose module at app/'s top level: each serves a room that says what it serves."""
    assert sorted(path.name for path in APP.glob("*.py")) == ["__init__.py"]


def test_the_turn_keeps_few_modules_at_its_top_level() -> None:
    top = sorted(path.name for path in (APP / "turn").glob("*.py"))
    assert len(top) <= TURN_TOP_LEVEL_AT_MOST, top


def test_no_two_modules_share_a_name_but_the_pattern_names() -> None:
    seen: dict[str, list[str]] = {}
    for path in sorted(APP.rglob("*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(APP)))
    shared = {name: places for name, places in seen.items()
              if len(places) > 1 and name not in PATTERN_NAMES}
    assert shared == {}


def test_the_pure_core_and_the_turn_differ_by_more_than_a_letter() -> None:
    packages = {path.name for path in APP.iterdir() if (path / "__init__.py").is_file()}
    close = {(a, b) for a in packages for b in packages
             if a < b and (a + "s" == b or b + "s" == a)}
    assert close == set()
