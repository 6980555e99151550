"""Secrets out of everything the gateway writes for others to read: log lines, stream traces,
error bodies.

Chatgate holds other people's credentials (model servers' keys, its users' API keys, the
database's password) and relays text it does not control: a model server's error body may
quote the key it was sent ("Incorrect API key provided: sk-…"), a traceback may hold a URL
with its password. One rule covers every way out:

- the secrets the process knows (`SECRETS.know`, called once at start with the model servers'
  keys and the passwords of the database and Redis URLs) are replaced wherever they appear;
- so are the common credential shapes, known or not: `Bearer <token>`, OpenAI-style `sk-…`
  keys, Chatgate's own `cg_…` keys, and the password of any `scheme://user:password@host`.

What is replaced reads `[REDACTED]`. A known secret shorter than MIN_SECRET_CHARS is not
replaced: it would blank out ordinary words, and it guards nothing."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

REDACTED = "[REDACTED]"
MIN_SECRET_CHARS = 8

#: Credential shapes redacted whether the process knows the secret or not, each with what
#: stays of it (the scheme's name, the user of a URL) so a reader still sees what it was.
_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{12,}"), rf"\g<1>{REDACTED}"),
    (re.compile(r"\bsk-[A-Za-z0-9_*-]{16,}"), REDACTED),
    (re.compile(r"\bcg_[A-Za-z0-9_-]{16,}"), REDACTED),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]*):[^\s/@]+@"), rf"\g<1>:{REDACTED}@"),
)


class Redactor:
    """The known secrets and the shapes, applied to a text or to any JSON-like value."""

    def __init__(self) -> None:
        self._known: set[str] = set()
        self._pattern: re.Pattern[str] | None = None

    def know(self, *secrets: str | None) -> None:
        """Secrets to replace from now on (None and short values are skipped)."""
        added = {s for s in secrets if s and len(s) >= MIN_SECRET_CHARS} - self._known
        if not added:
            return
        self._known |= added
        # Longest first: a secret that contains another is replaced whole.
        ordered = sorted(self._known, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(s) for s in ordered))

    def text(self, value: str) -> str:
        if self._pattern is not None:
            value = self._pattern.sub(REDACTED, value)
        for shape, replacement in _SHAPES:
            value = shape.sub(replacement, value)
        return value

    def value(self, value: Any) -> Any:
        """Every string of a value redacted: mapping keys and values, list and tuple items,
        an exception's text (it may quote what failed); other values as they are."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        if isinstance(value, BaseException):
            return self.text(f"{type(value).__name__}: {value}")
        return value


def url_password(url: str | None) -> str | None:
    """The password of a URL (`postgresql://user:password@host/db`), if it has one."""
    if not url:
        return None
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def secrets_of(keys: Iterable[str | None], urls: Iterable[str | None]) -> list[str]:
    """The secrets among the values a process starts with: keys, and the URLs' passwords."""
    return [s for s in (*keys, *(url_password(u) for u in urls)) if s]


#: The process's one redactor: every log line, trace and error body goes through it.
SECRETS = Redactor()
