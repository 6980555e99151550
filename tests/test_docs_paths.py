"""The docs name the code as it is: every `app/...` path, every dotted `app.` module name and
every `scripts/`, `tests/` or `alembic/` path that docs/*.md or README.md mention exists, so a
module renamed or moved cannot leave a reader looking for it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([*ROOT.glob("docs/*.md"), ROOT / "README.md"])

#: A path into the repository: starts a word, runs to the last name character.
PATH = re.compile(r"(?<![\w/.\-])((?:app|scripts|tests|alembic)/[\w/.*\-]*[\w/*])")
#: A dotted name under app: `app.turn.rows`, `app.gateway.main.turn_observers`.
DOTTED = re.compile(r"(?<![\w/.\-])(app(?:\.\w+)+)")


def path_exists(path: str) -> bool:
    """A file or folder of the checkout (a glob names at least one)."""
    path = path.rstrip("/.")
    if "*" in path:
        return any(ROOT.glob(path))
    return (ROOT / path).exists()


def name_exists(dotted: str) -> bool:
    """The longest module prefix imports, and the rest are its attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        base = ROOT.joinpath(*parts[:cut])
        if not (base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()):
            continue
        found: object = importlib.import_module(module_name)
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def mentions(doc: Path) -> list[tuple[int, str, bool]]:
    """(line, what, resolves) for each path and dotted name the document mentions."""
    found = []
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        found += [(number, path, path_exists(path)) for path in PATH.findall(line)]
        found += [(number, name, name_exists(name)) for name in DOTTED.findall(line)]
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: doc.name)
def test_every_path_and_module_a_doc_names_exists(doc: Path) -> None:
    missing = [f"{doc.name}:{line}: {what}" for line, what, ok in mentions(doc) if not ok]
    assert missing == []


def test_the_check_sees_a_missing_module() -> None:
    """The check can fail: the old names of moved modules are caught, current ones pass."""
    for gone in ("app/turns/answer.py", "app/main.py", "app/settings.py",
                 "scripts/no_such_script.py"):
        assert not path_exists(gone), gone
    for gone in ("app.turns", "app.main", "app.settings", "app.turn.service",
                 "app.gateway.main.no_such_function"):
        assert not name_exists(gone), gone
    for here in ("app/answer/answer.py", "app/turn/rows/", "tests/turn/openai/test_chat*.py"):
        assert path_exists(here), here
    for here in ("app.answer", "app.gateway.main.turn_observers", "app.store.errors"):
        assert name_exists(here), here
    assert PATH.findall("see `app/turn/run/loop.py`.") == ["app/turn/run/loop.py"]
    assert DOTTED.findall("(`app.turn.rows`)") == ["app.turn.rows"]


#: The architecture page shows the rooms, a turn's life and the contracts; reference detail
#: belongs in the module docstrings and the other docs, where it stays next to what it says.
ARCHITECTURE_AT_MOST_BYTES = 20_000


def test_the_architecture_page_stays_an_overview() -> None:
    size = len((ROOT / "docs" / "architecture.md").read_bytes())
    assert size <= ARCHITECTURE_AT_MOST_BYTES, size
