"""`scripts/serve` with a bad models file: one sentence naming the entry and the field, exit
2, nothing said about listening."""

from __future__ import annotations

from pathlib import Path

from tests.scripts.conftest import SERVE
from tests.scripts.test_bad_settings import _run, assert_one_sentence
from tests.support.gateway import free_port


def test_serve_refuses_a_bad_models_file_in_one_sentence(installed_venv: None,
                                                         tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text('[servers.a]\nbase_url = "http://127.0.0.1:9/v1"\n\n'
                    '[[models]]\nname = "one"\nserver = "a"\nfallbacks = ["two"]\n')
    done = _run([str(SERVE), "--port", str(free_port())],
                {"CHATGATE_MODELS_FILE": str(path)}, tmp_path)
    assert_one_sentence(done, "CHATGATE_MODELS_FILE: model 'one': field 'fallbacks' names "
                              "'two', which is no model; the models are 'one'")


def test_serve_refuses_a_models_file_url_with_credentials_without_repeating_them(
        installed_venv: None, tmp_path: Path) -> None:
    """Every call to that model would fail (the client sends the key as a bearer token and
    refuses a URL with credentials besides): the start is refused, pointing to where the key
    goes, and the password is not said."""
    path = tmp_path / "models.toml"
    path.write_text('[servers.a]\nbase_url = "https://me:hunter2@api.example.com/v1"\n\n'
                    '[[models]]\nname = "one"\nserver = "a"\n')
    done = _run([str(SERVE), "--port", str(free_port())],
                {"CHATGATE_MODELS_FILE": str(path)}, tmp_path)
    assert_one_sentence(done, "CHATGATE_MODELS_FILE: server 'a': field 'base_url' must not "
                              "hold a user name and password; name the environment variable "
                              "that holds the key in field 'api_key_env'")
    assert "hunter2" not in done.stdout + done.stderr
