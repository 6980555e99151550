"""Variables named like a setting that no setting reads: a typo is otherwise silent, and the
gateway starts as if the variable had not been set (`CHATGATE_AUTH_MDOE=keys` starts with auth
off on loopback). Each is one warning line naming the closest setting; a near miss of a setting
that decides who gets in or where the data goes refuses the start instead.

Pure: the caller passes the environment and the `.env` entries, and writes the lines."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pydantic import AliasChoices
from pydantic_settings import BaseSettings

PREFIX = "CHATGATE_"
#: Variables of the project's scripts, container and test suite, not of the settings.
OTHER_NAMES = frozenset({
    "CHATGATE_PORT", "CHATGATE_MIGRATE", "CHATGATE_GRACEFUL_SHUTDOWN_S",  # the container
    "CHATGATE_EXTRA",  # scripts/bootstrap.sh
    "CHATGATE_LITELLM_VERSION", "CHATGATE_NODE_CACHE",  # scripts/test_clients.sh
})
#: Prefixes of the test suite's own variables (tests/conftest.py, tests/support).
OTHER_PREFIXES = ("CHATGATE_TEST_", "CHATGATE_REQUIRE_")
#: Settings whose misspelling refuses the start, and why they matter that much.
GUARDED = {
    "CHATGATE_AUTH_MODE": "it decides who gets in",
    "CHATGATE_DATABASE_URL": "it decides where the data goes",
}
#: The most edits (a letter added, dropped, changed, or two swapped) a near miss is from a
#: guarded setting's name.
NEAR_MISS_EDITS = 2
#: How alike a name must be to another to be offered as the one meant (difflib's ratio).
SUGGEST_CUTOFF = 0.6


@dataclass(frozen=True, slots=True)
class UnknownName:
    """A variable no setting reads, where it was set, and the setting it is closest to."""

    name: str
    source: str  # "the environment" or ".env"
    closest: str | None

    @property
    def refused(self) -> bool:
        """A near miss of a guarded setting: starting without it would be a silent change
        of who gets in or of where the data goes."""
        return self.closest in GUARDED and edits(
            self.name.removeprefix(PREFIX), self.closest.removeprefix(PREFIX)
        ) <= NEAR_MISS_EDITS

    def warning(self) -> str:
        meant = f"; did you mean {self.closest}?" if self.closest else ""
        return f"{self.name} (in {self.source}) is not a setting and is ignored{meant}"

    def refusal(self) -> str:
        assert self.closest is not None
        return (f"{self.name} (in {self.source}) is not a setting: did you mean "
                f"{self.closest}? {GUARDED[self.closest].capitalize()}, so the gateway does "
                "not start with it misspelt")


def setting_names(*settings: type[BaseSettings]) -> set[str]:
    """The variables each settings class reads under the prefix (its aliases included)."""
    names: set[str] = set()
    for cls in settings:
        prefix = str(cls.model_config.get("env_prefix", ""))
        for field, info in cls.model_fields.items():
            alias = info.validation_alias
            if isinstance(alias, AliasChoices):
                names.update(c.upper() for c in alias.choices if isinstance(c, str))
            elif isinstance(alias, str):
                names.add(alias.upper())
            else:
                names.add(f"{prefix}{field}".upper())
    return {name for name in names if name.startswith(PREFIX)}


def unknown_names(known: set[str], sources: Mapping[str, Iterable[str]]) -> list[UnknownName]:
    """Each `CHATGATE_` name of each source (its name: the names set there) that `known`
    lacks, once, with the closest known setting."""
    found: list[UnknownName] = []
    seen: set[str] = set()
    for source, names in sources.items():
        for name in names:
            upper = name.upper()
            if (not upper.startswith(PREFIX) or upper in known or upper in OTHER_NAMES
                    or upper.startswith(OTHER_PREFIXES) or upper in seen):
                continue
            seen.add(upper)
            found.append(UnknownName(upper, source, closest(upper, known)))
    return found


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name most like `name`, compared without the prefix they share (with it,
    every name looks alike), or None when none is alike enough."""
    by_suffix = {k.removeprefix(PREFIX): k for k in known}
    close = difflib.get_close_matches(name.removeprefix(PREFIX), sorted(by_suffix), n=1,
                                      cutoff=SUGGEST_CUTOFF)
    return by_suffix[close[0]] if close else None


def edits(a: str, b: str) -> int:
    """The optimal string alignment distance: letters added, dropped, changed, or two
    neighbours swapped (AUTH_MDOE is one edit from AUTH_MODE)."""
    rows = [list(range(len(b) + 1))]
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            row[j] = min(rows[i - 1][j] + 1, row[j - 1] + 1, rows[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], rows[i - 2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]
