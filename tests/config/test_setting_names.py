"""A misspelt `CHATGATE_` variable is said at start, naming the setting meant; a near miss of
the two settings that decide who gets in and where the data goes refuses the start."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.gateway.startup import ConfigError, check_setting_names


def warnings_of(capsys: pytest.CaptureFixture[str], env: dict[str, str],
                env_file: Path | None = None) -> list[str]:
    check_setting_names(env, str(env_file) if env_file else "/nonexistent/.env")
    return capsys.readouterr().err.splitlines()


def test_each_unknown_variable_is_one_warning_naming_the_closest_setting(
        capsys: pytest.CaptureFixture[str]) -> None:
    env = {"CHATGATE_UPSTREAM_MODLE": "gpt-4o", "CHATGATE_DEMO_DELAY": "3",
           "CHATGATE_UPSTREAM_MODEL": "x", "CHATGATE_PORT": "8000", "HOME": "/root",
           "CHATGATE_TEST_WORKERS": "0", "CHATGATE_ZZZ": "1"}
    assert warnings_of(capsys, env) == [
        "warning: CHATGATE_UPSTREAM_MODLE (in the environment) is not a setting and is "
        "ignored; did you mean CHATGATE_UPSTREAM_MODEL?",
        "warning: CHATGATE_DEMO_DELAY (in the environment) is not a setting and is ignored; "
        "did you mean CHATGATE_DEMO_DELAY_MS?",
        "warning: CHATGATE_ZZZ (in the environment) is not a setting and is ignored",
    ]


def test_the_env_file_is_checked_too(capsys: pytest.CaptureFixture[str],
                                     tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("CHATGATE_LOG_LEVLE=DEBUG\nCHATGATE_LOG_LEVEL=INFO\n")
    assert warnings_of(capsys, {}, env_file) == [
        f"warning: CHATGATE_LOG_LEVLE (in {env_file}) is not a setting and is ignored; did "
        "you mean CHATGATE_LOG_LEVEL?"]


@pytest.mark.parametrize(("name", "meant", "why"), [
    ("CHATGATE_AUTH_MDOE", "CHATGATE_AUTH_MODE", "It decides who gets in"),
    ("CHATGATE_AUTHMODE", "CHATGATE_AUTH_MODE", "It decides who gets in"),
    ("chatgate_auth_mod", "CHATGATE_AUTH_MODE", "It decides who gets in"),
    ("CHATGATE_DATABSE_URL", "CHATGATE_DATABASE_URL", "It decides where the data goes"),
    ("CHATGATE_DATABASE_URI", "CHATGATE_DATABASE_URL", "It decides where the data goes"),
])
def test_a_near_miss_of_auth_or_database_refuses_the_start(name: str, meant: str,
                                                          why: str) -> None:
    with pytest.raises(ConfigError) as refused:
        check_setting_names({name: "keys"}, "/nonexistent/.env")
    assert str(refused.value) == (
        f"{name.upper()} (in the environment) is not a setting: did you mean {meant}? {why}, "
        "so the gateway does not start with it misspelt")


def test_a_name_far_from_the_guarded_ones_only_warns(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    """CHATGATE_BASE_URL reads like the database's name but is four edits from it."""
    [line] = warnings_of(capsys, {"CHATGATE_BASE_URL": "http://x"})
    assert line.startswith("warning: CHATGATE_BASE_URL (in the environment) is not a setting")
