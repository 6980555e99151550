"""The gateway's catalog of models from its settings: the models file
(`CHATGATE_MODELS_FILE`, TOML) when there is one, else today's one model server
(`CHATGATE_UPSTREAM_*`, `CHATGATE_MODELS`). Also each server's key, read from the
environment variable the file names: the key never enters the catalog, so nothing that logs
the catalog can leak it."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from app.config.catalog import (
    Catalog,
    ModelDefaults,
    ModelsFileError,
    parse_catalog,
    single_server_catalog,
)
from app.config.settings import NO_KEY, Settings
from app.observe.redaction import secrets_of


@dataclass(frozen=True)
class LoadedCatalog:
    """The catalog and each server's key by server name."""

    catalog: Catalog
    keys: Mapping[str, str]

    def secrets(self, settings: Settings) -> list[str]:
        """What a process of these settings must never write out (app.observe.redaction): the
        servers' keys, and the passwords of the database and Redis URLs."""
        keys = [key for key in self.keys.values() if key != NO_KEY]
        return secrets_of(keys, [settings.database_url, settings.redis_url])


def model_defaults(settings: Settings) -> ModelDefaults:
    return ModelDefaults(
        max_tokens=settings.upstream_max_tokens, temperature=settings.upstream_temperature,
        connect_timeout_s=settings.upstream_connect_timeout_s,
        first_token_timeout_s=settings.first_token_timeout_s,
        read_timeout_s=settings.upstream_read_timeout_s, max_answer_s=settings.max_answer_s,
        max_retries=settings.upstream_max_retries,
        reasoning_format=settings.reasoning_format, reasoning_tag=settings.reasoning_tag,
        tool_format=settings.tool_format, tool_tag=settings.tool_tag)


def load_catalog(settings: Settings, environ: Mapping[str, str] | None = None, *,
                 place_demo: bool = True) -> LoadedCatalog:
    """Raises ModelsFileError (one sentence) for a file that is missing, unreadable, not
    TOML, or wrong, and for a key variable that is not set. The file's demo servers
    (`base_url = "demo"`) are placed at `demo_base_url`, which scripts/serve sets once it
    started the demo model server; `place_demo=False` leaves them unplaced, for the check
    made before that server runs."""
    env = os.environ if environ is None else environ
    defaults = model_defaults(settings)
    if not settings.models_file:
        catalog = single_server_catalog(settings.upstream_base_url, settings.models,
                                        settings.upstream_model, defaults)
        return LoadedCatalog(catalog, {"default": settings.upstream_api_key})
    path = Path(settings.models_file)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelsFileError(f"the models file {path} cannot be read ({exc.strerror})") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ModelsFileError(f"the models file {path} is not valid TOML: {exc}") from exc
    catalog = parse_catalog(data, defaults)
    if place_demo:
        catalog = catalog.with_demo_url(settings.demo_base_url)
    keys: dict[str, str] = {}
    for server in catalog.servers:
        if server.api_key_env is None:
            keys[server.name] = NO_KEY
        elif (key := env.get(server.api_key_env)) is None:
            raise ModelsFileError(f"server '{server.name}': field 'api_key_env' names "
                                  f"{server.api_key_env}, which is not set")
        else:
            keys[server.name] = key
    return LoadedCatalog(catalog, keys)
