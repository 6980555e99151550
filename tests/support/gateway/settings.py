"""Gateway and demo-model settings for tests: made only of the values a test gives, so a
developer's CHATGATE_ variables or `.env` cannot change what a test runs (a subprocess gets a
cleaned environment for the same reason, see processes.clean_env).

Tests write settings as CHATGATE_* variables (`TEST_GATEWAY_ENV`, `env=` of the fixtures),
the form a gateway process reads; `settings_from_env` turns them into Settings for a gateway
in this process. `gateway_settings` is the keyword form for a gateway in the test's loop."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from app.config.settings import Settings
from app.demo_llm import DemoSettings

if TYPE_CHECKING:
    from tests.support.gateway.upstream import DemoLlm

#: Gateway settings for tests: short timeouts so failure paths are quick. The first token
#: gets 5 s, room for a loaded machine (the demo model sends it in milliseconds); a test of
#: that timeout sets its own, shorter one.
TEST_GATEWAY_ENV: Mapping[str, str] = {
    "CHATGATE_AUTH_MODE": "keys",
    "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "5.0",
    "CHATGATE_UPSTREAM_READ_TIMEOUT_S": "5.0",
    "CHATGATE_UPSTREAM_CONNECT_TIMEOUT_S": "2.0",
    "CHATGATE_UPSTREAM_MAX_RETRIES": "0",
    "CHATGATE_KEEPALIVE_S": "1.0",
    "CHATGATE_LOG_LEVEL": "INFO",
    # A client that leaves ends its turn at once, as before resumable streams: the tests
    # of resuming set their own grace.
    "CHATGATE_RESUME_GRACE_S": "0",
}

#: What a same-loop gateway changes of TEST_GATEWAY_ENV: its tests hold turns and read
#: /metrics between requests, so a first token gets 5 s whatever TEST_GATEWAY_ENV gives.
SAME_LOOP_OVERRIDES: Mapping[str, Any] = {"first_token_timeout_s": 5.0}


class _OnlyGivenValues:
    """Settings sources: the values given to the constructor, nothing else (a mixin put
    before the settings class)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


class ExplicitSettings(_OnlyGivenValues, Settings):
    """Gateway settings made only of the values given."""


class ExplicitDemoSettings(_OnlyGivenValues, DemoSettings):
    """Demo model settings made only of the values given (no CHATGATE_DEMO_ variables)."""


def env_values(env: Mapping[str, str]) -> dict[str, str]:
    """Setting name -> value of CHATGATE_* variables; a name that is not a setting is a typo
    and fails loudly."""
    values: dict[str, str] = {}
    for name, value in env.items():
        field = name.removeprefix("CHATGATE_").lower()
        if not name.startswith("CHATGATE_") or field not in Settings.model_fields:
            raise ValueError(f"{name} is not a gateway setting")
        values[field] = value
    return values


def settings_from_env(env: Mapping[str, str]) -> Settings:
    """Gateway settings from CHATGATE_* variables, the form tests (and processes) use."""
    return ExplicitSettings(**env_values(env))  # type: ignore[arg-type]


def gateway_env(database_url: str, env: Mapping[str, str]) -> dict[str, str]:
    """TEST_GATEWAY_ENV with a test's own variables and its database."""
    return {**TEST_GATEWAY_ENV, **env, "CHATGATE_DATABASE_URL": database_url}


def gateway_settings(database_url: str, upstream: DemoLlm, **overrides: Any) -> Settings:
    """Settings of a same-loop gateway: TEST_GATEWAY_ENV's, SAME_LOOP_OVERRIDES, then the
    test's keyword `overrides`."""
    values: dict[str, Any] = {
        **env_values(gateway_env(database_url, {})), **SAME_LOOP_OVERRIDES,
        "upstream_base_url": upstream.base_url, **overrides}
    return ExplicitSettings(**values)
