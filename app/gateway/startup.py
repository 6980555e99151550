"""What an operator reads when a setting, or what it points at, is wrong: one sentence on
stderr and exit 2, never a traceback. `scripts/serve` and every operator script start inside
`one_sentence_on_error()`, so a wrong value reads the same everywhere:

    error: CHATGATE_AUTH_MODE must be keys or off, not 'foo'

The sentence of a refused setting is built from pydantic's error for the first bad field, so
a field added to Settings (a Literal, a bound, a validator raising SettingRefused or
ValueError) gets its sentence without code here."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, ValidationError
from pydantic_core import ErrorDetails

from app.config.settings import SettingRefused, Settings, get_settings

#: Exit status of a refused start: the operator's setting or environment, not a crash.
EXIT_CONFIG = 2
#: pydantic's error types, as what the value must be instead.
_ALLOWED: dict[str, str] = {
    "float_parsing": "a number", "float_type": "a number",
    "int_parsing": "a whole number", "int_type": "a whole number",
    "int_from_float": "a whole number",
    "bool_parsing": "true or false", "bool_type": "true or false",
    "string_type": "text", "list_type": "a list", "json_invalid": "valid JSON",
}
_BOUNDS = {"gt": "above {}", "ge": "at least {}", "lt": "below {}", "le": "at most {}"}
#: Values never repeated in an error: what a field of this name holds is a secret.
_SECRET = re.compile(r"(key|password|secret|token)$")
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@/\s]*@")


class ConfigError(Exception):
    """The start is refused for a reason the operator fixes; str() is the one sentence."""


def env_name(field: str) -> str:
    """The environment variable an operator sets for a Settings field. A field read under
    an alias (CHATGATE_DATABASE_URL or DATABASE_URL) is named as the operator wrote it."""
    info = Settings.model_fields.get(field) or next(
        (info for info in Settings.model_fields.values()
         if isinstance(info.validation_alias, AliasChoices)
         and field in info.validation_alias.choices), None)
    if info is None:
        return field.upper()
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        names = [choice.upper() for choice in alias.choices if isinstance(choice, str)]
        given = [name for name in names if name in {key.upper() for key in os.environ}]
        return (given or names)[0]
    if isinstance(alias, str):
        return alias.upper()
    prefix = Settings.model_config.get("env_prefix", "")
    return f"{prefix}{field}".upper()


def _shown(field: str, value: Any) -> str:
    if _SECRET.search(field.lower()):
        return "the value given"
    text = value if isinstance(value, str) else str(value)
    return repr(_URL_PASSWORD.sub(r"\1***@", text)[:200])


def _allowed(error: ErrorDetails) -> str:
    ctx = error.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, SettingRefused):
        return cause.allowed
    if isinstance(cause, ValueError):
        return str(cause)
    if error["type"] == "literal_error":
        return str(ctx.get("expected", "")).replace("'", "")
    for bound, words in _BOUNDS.items():
        if bound in ctx:
            return f"a number {words.format(f'{ctx[bound]:g}')}"
    return _ALLOWED.get(error["type"], error["msg"].removeprefix("Input should be ").lower())


def settings_sentence(error: ValidationError) -> str:
    """`CHATGATE_X must be <allowed>, not '<value>'` for the first field pydantic refused."""
    first = error.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else ""
    cause = (first.get("ctx") or {}).get("error")
    refused = cause if isinstance(cause, SettingRefused) else None
    reason = f": {refused.reason}" if refused and refused.reason else ""
    shown = (repr(refused.shown[:200]) if refused and refused.shown is not None
             else _shown(field, first["input"]))
    return f"{env_name(field)} must be {_allowed(first)}, not {shown}{reason}"


def sentence_of(error: BaseException) -> str | None:
    """The one sentence for an error a start may end in, or None for a bug (a traceback).
    The store is imported only here, when something failed: checking the settings must not
    load it."""
    from app.store.errors import DatabaseUnavailable
    from app.store.migrations import DatabaseMissing, NotMigrated

    if isinstance(error, ValidationError) and error.title == Settings.__name__:
        return settings_sentence(error)
    if isinstance(error, ConfigError | NotMigrated | DatabaseMissing | DatabaseUnavailable):
        return str(error)
    return None


@contextmanager
def one_sentence_on_error() -> Iterator[None]:
    """Run a start (or a whole script); a refused setting or an unreachable, missing or
    unmigrated database ends it as `error: <sentence>` on stderr and exit 2."""
    try:
        yield
    except Exception as error:
        sentence = sentence_of(error)
        if sentence is None:
            raise
        sys.stderr.write(f"error: {sentence}\n")
        sys.stderr.flush()
        raise SystemExit(EXIT_CONFIG) from None


def check_setting_names(environ: Mapping[str, str] | None = None,
                        env_file: str | None = None) -> None:
    """One `warning:` line on stderr for each `CHATGATE_` variable (of the environment, and
    of the `.env` file the settings read) that no setting reads, naming the closest one; a
    near miss of a setting that decides who gets in or where the data goes is a ConfigError
    (the start refused) instead."""
    from dotenv import dotenv_values

    from app.config.setting_names import setting_names, unknown_names
    from app.demo_llm.options import DemoSettings

    env = os.environ if environ is None else environ
    path = Path(env_file or str(Settings.model_config.get("env_file") or ".env"))
    sources = {"the environment": list(env)}
    if path.is_file():
        sources[str(path)] = list(dotenv_values(path))
    unknown = unknown_names(setting_names(Settings, DemoSettings), sources)
    for name in unknown:
        if name.refused:
            raise ConfigError(name.refusal())
    for name in unknown:
        sys.stderr.write(f"warning: {name.warning()}\n")
    sys.stderr.flush()


def checked_settings() -> Settings:
    """The process's settings, validated now: the first thing an entry point does. A
    misspelt variable is said first: it may be why a setting is not what was meant."""
    with one_sentence_on_error():
        check_setting_names()
        return get_settings()
