"""What a user id can be, in one place: the API refuses anything else as bad input, and
scripts/keys.py never makes a key for a user no request could name. Pure."""

from __future__ import annotations

import unicodedata

#: The column's width (VARCHAR(255)); PostgreSQL would refuse a longer one with an error.
MAX_USER_ID_CHARS = 255


def user_id_problem(value: str) -> str | None:
    """Why `value` cannot be a user id (blank, too long, a control character such as NUL or
    a tab, which PostgreSQL refuses or a person cannot type back), or None."""
    if not value.strip():
        return "a user id must not be blank"
    if len(value) > MAX_USER_ID_CHARS:
        return f"a user id may have at most {MAX_USER_ID_CHARS} characters"
    if any(unicodedata.category(char) in ("Cc", "Cs") for char in value):
        return "a user id must not contain control characters"
    return None
