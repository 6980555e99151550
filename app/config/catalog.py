"""The models the gateway offers and the model servers behind them (pure: no file, no
environment, no socket; app.config.models_file reads the file and the keys).

A models file (TOML) names the model servers and the models users pick:

    [servers.hosted]
    base_url = "https://api.example.com/v1"
    api_key_env = "HOSTED_API_KEY"          # the NAME of the variable holding the key

    [[models]]
    name = "smart"                          # what users pick
    server = "hosted"
    model_id = "gpt-4o"                     # what the server is asked for
    max_tokens = 2048
    prices = { prompt = 2.5, completion = 10.0 }
    fallbacks = ["local"]

Every field but `name` and `server` has a default from the gateway's settings
(`ModelDefaults`). A bad file is refused with one sentence naming the entry and the field
(`ModelsFileError`), so a typo stops the gateway at start, not a user's turn later."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from app.stream.tools import TOOL_FORMATS

#: How a model's answers carry its thinking (the `reasoning_format` setting's values).
REASONING_FORMATS = ("think", "think-prefilled", "none")
_TAG_NAME = re.compile(r"\A[A-Za-z0-9_-]+\Z")
_ENV_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
_MODEL_FIELDS = frozenset({
    "name", "server", "model_id", "max_tokens", "temperature", "connect_timeout_s",
    "first_token_timeout_s", "read_timeout_s", "max_answer_s", "max_retries", "prices",
    "reasoning_format", "reasoning_tag", "tool_format", "tool_tag", "continuation",
    "fallbacks",
})
_SERVER_FIELDS = frozenset({"base_url", "api_key_env"})
#: A server's `base_url` that names the built-in demo model server: scripts/serve starts it
#: on a loopback port and the gateway calls it there (`with_demo_url`).
DEMO_SERVER = "demo"


class ModelsFileError(ValueError):
    """A models file the gateway cannot run with; the message is one sentence naming the
    entry and the field."""


@dataclass(frozen=True, slots=True)
class ModelServer:
    """An OpenAI-compatible model server: where it is and which environment variable holds
    its key (never the key itself: the catalog may be logged)."""

    name: str
    base_url: str | None
    api_key_env: str | None = None


@dataclass(frozen=True, slots=True)
class ModelDefaults:
    """What a model entry does not say: the gateway's settings."""

    max_tokens: int = 1024
    temperature: float = 0.7
    connect_timeout_s: float = 5.0
    first_token_timeout_s: float = 30.0
    read_timeout_s: float = 60.0
    max_answer_s: float | None = 600.0
    max_retries: int = 1
    reasoning_format: str | None = None
    reasoning_tag: str | None = None
    tool_format: str | None = None
    tool_tag: str | None = None


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One model users can pick, and how its server is called."""

    name: str
    server: ModelServer
    model_id: str
    max_tokens: int
    temperature: float
    connect_timeout_s: float
    first_token_timeout_s: float
    read_timeout_s: float
    max_answer_s: float | None
    max_retries: int
    #: USD per million prompt and completion tokens; None: the price table's.
    prices: tuple[float, float] | None = None
    reasoning_format: str | None = None
    reasoning_tag: str | None = None
    #: How its answers carry tool calls inline (`none`, `hermes`) and the tag's name.
    tool_format: str | None = None
    tool_tag: str | None = None
    #: After a mid-answer failure, ask the next model (or this one) to finish the answer.
    continuation: bool = True
    fallbacks: tuple[str, ...] = ()
    #: Offered to clients (/v1/models, the page); a settings-made default may be unlisted.
    listed: bool = True


@dataclass(frozen=True, slots=True)
class Catalog:
    """Every model, in the file's order; `default` is what a turn without a choice uses."""

    models: tuple[ModelSpec, ...]
    default: str
    _by_name: dict[str, ModelSpec] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name.update({spec.name: spec for spec in self.models})

    def get(self, name: str) -> ModelSpec | None:
        return self._by_name.get(name)

    def __getitem__(self, name: str) -> ModelSpec:
        return self._by_name[name]

    @property
    def listed(self) -> list[str]:
        """The names clients may pick, in order."""
        return [spec.name for spec in self.models if spec.listed]

    def usable(self, allowed: Sequence[str] | None) -> list[str]:
        """The names a key limited to `allowed` (None: no limit) may pick, in order: what
        every list of models a key is shown holds (/api/models, /v1/models), and all that
        /v1/models/{id} finds for it."""
        return [name for name in self.listed if allowed is None or name in allowed]

    @property
    def servers(self) -> list[ModelServer]:
        """Each model server once, in the order models name them."""
        seen: dict[str, ModelServer] = {}
        for spec in self.models:
            seen.setdefault(spec.server.name, spec.server)
        return list(seen.values())

    @property
    def wants_demo(self) -> bool:
        """A server of the file is the built-in demo model server (`base_url = "demo"`)."""
        return any(server.base_url == DEMO_SERVER for server in self.servers)

    def with_demo_url(self, url: str | None) -> Catalog:
        """The catalog with its demo servers at `url`, where the demo model server listens.
        Without one (the gateway started by something other than scripts/serve) a model on
        it could never answer: ModelsFileError, one sentence saying what to do."""
        if not self.wants_demo:
            return self
        if url is None:
            demo = next(s.name for s in self.servers if s.base_url == DEMO_SERVER)
            raise ModelsFileError(
                f"server '{demo}': base_url \"{DEMO_SERVER}\" is the built-in demo model "
                "server, which scripts/serve (chatgate serve) starts; elsewhere give its URL")
        moved = {s.name: replace(s, base_url=url) for s in self.servers
                 if s.base_url == DEMO_SERVER}
        models = tuple(replace(spec, server=moved.get(spec.server.name, spec.server))
                       for spec in self.models)
        return Catalog(models, self.default)

    def chain(self, name: str) -> list[ModelSpec]:
        """The model and then its fallbacks, each once, in order."""
        first = self._by_name[name]
        chain, names = [first], {first.name}
        for other in first.fallbacks:
            if other not in names:
                names.add(other)
                chain.append(self._by_name[other])
        return chain


class ModelNotOffered(LookupError):
    """The request names a model the catalog does not list; str() is the name asked for,
    `available` what the key may pick instead (for the error a user reads)."""

    def __init__(self, name: str, available: Sequence[str] = ()) -> None:
        super().__init__(name)
        self.available = tuple(available)

    def sentence(self, template: str = "there is no model named '{name}'") -> str:
        """`template` (with the name) and the models the key may pick, as one sentence."""
        said = template.format(name=self)
        if not self.available:
            return said
        return f"{said}; the models are {', '.join(repr(n) for n in self.available)}"


class ModelNotAllowed(PermissionError):
    """The request's key may not use the model it names."""


def choose(catalog: Catalog, requested: str | None, remembered: str | None,
           allowed: Sequence[str] | None) -> str:
    """The model of a turn: the one asked for (listed, and allowed to the key, else
    ModelNotOffered or ModelNotAllowed), else the thread's last choice, else the default;
    for a key limited to some models, the first of those the catalog lists when neither
    is allowed."""
    def permitted(name: str) -> bool:
        return allowed is None or name in allowed

    if requested is not None:
        if requested not in catalog.listed and requested != catalog.default:
            raise ModelNotOffered(requested, catalog.usable(allowed))
        if not permitted(requested):
            raise ModelNotAllowed(requested)
        return requested
    for name in (remembered, catalog.default):
        if name is not None and catalog.get(name) is not None and permitted(name):
            return name
    for name in catalog.usable(allowed):
        return name
    raise ModelNotAllowed(catalog.default)


def single_server_catalog(base_url: str | None, names: Sequence[str], default: str,
                          defaults: ModelDefaults) -> Catalog:
    """No models file: today's one model server, every offered name sent upstream as it is
    (`CHATGATE_MODELS`), and the native turn's model (`upstream_model`) first. No model
    continues a broken answer: with one server and no file, an answer the server broke
    off ends `failed` as it always did."""
    server = ModelServer("default", base_url)
    ordered = [default, *(n for n in names if n != default)]
    specs = tuple(replace(_spec(name, server, name, defaults,
                                listed=name in names or not names), continuation=False)
                  for name in ordered)
    return Catalog(specs, default)


def _spec(name: str, server: ModelServer, model_id: str, defaults: ModelDefaults, *,
          listed: bool = True) -> ModelSpec:
    return ModelSpec(
        name=name, server=server, model_id=model_id, max_tokens=defaults.max_tokens,
        temperature=defaults.temperature, connect_timeout_s=defaults.connect_timeout_s,
        first_token_timeout_s=defaults.first_token_timeout_s,
        read_timeout_s=defaults.read_timeout_s, max_answer_s=defaults.max_answer_s,
        max_retries=defaults.max_retries, reasoning_format=defaults.reasoning_format,
        reasoning_tag=defaults.reasoning_tag, tool_format=defaults.tool_format,
        tool_tag=defaults.tool_tag, listed=listed)


def parse_catalog(data: Mapping[str, Any], defaults: ModelDefaults) -> Catalog:
    """The catalog of a parsed models file. Raises ModelsFileError."""
    unknown = set(data) - {"servers", "models", "default"}
    if unknown:
        raise ModelsFileError(f"the models file has an unknown section '{sorted(unknown)[0]}'")
    servers = _servers(data.get("servers"))
    entries = data.get("models")
    if not isinstance(entries, list) or not entries:
        raise ModelsFileError("the models file needs at least one [[models]] entry")
    specs: list[ModelSpec] = []
    for index, entry in enumerate(entries):
        spec = _model(entry, index, servers, defaults)
        if any(s.name == spec.name for s in specs):
            raise ModelsFileError(f"model '{spec.name}': field 'name' is used twice")
        specs.append(spec)
    names = {s.name for s in specs}
    for spec in specs:
        for other in spec.fallbacks:
            if other not in names:
                raise ModelsFileError(
                    f"model '{spec.name}': field 'fallbacks' names '{other}', which is no "
                    f"model; the models are {_listed(names, specs)}")
    default = data.get("default", specs[0].name)
    if default not in names:
        raise ModelsFileError(f"field 'default' names {_quoted(default)}, which is no model; "
                              f"the models are {_listed(names, specs)}")
    return Catalog(tuple(specs), str(default))


def _quoted(value: Any) -> str:
    """A wrong value as a sentence quotes it: 'text', or `nothing` when it is missing."""
    return "nothing" if value is None else repr(str(value) if isinstance(value, str) else value)


def _listed(names: Any, specs: Sequence[ModelSpec] = ()) -> str:
    """The valid names, in the file's order, as a sentence lists them: 'a', 'b'."""
    ordered = [spec.name for spec in specs] or list(names)
    return ", ".join(f"'{name}'" for name in ordered)


def _servers(raw: Any) -> dict[str, ModelServer]:
    if not isinstance(raw, Mapping) or not raw:
        raise ModelsFileError("the models file needs at least one [servers.NAME] table")
    servers: dict[str, ModelServer] = {}
    for name, table in raw.items():
        where = f"server '{name}'"
        if not isinstance(table, Mapping):
            raise ModelsFileError(f"{where} must be a table")
        if extra := set(table) - _SERVER_FIELDS:
            raise ModelsFileError(f"{where}: field '{sorted(extra)[0]}' is unknown")
        base_url = table.get("base_url")
        if base_url == DEMO_SERVER:
            servers[str(name)] = ModelServer(str(name), DEMO_SERVER, None)
            continue
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ModelsFileError(f"{where}: field 'base_url' must be an http(s) URL, or "
                                  f"\"{DEMO_SERVER}\" for the built-in demo model server, not "
                                  f"{_quoted(base_url)}")
        if has_credentials(base_url):
            raise ModelsFileError(
                f"{where}: field 'base_url' must not hold a user name and password; name the "
                "environment variable that holds the key in field 'api_key_env'")
        key_env = table.get("api_key_env")
        if key_env is not None and not (isinstance(key_env, str) and _ENV_NAME.match(key_env)):
            raise ModelsFileError(
                f"{where}: field 'api_key_env' must be the name of an environment variable")
        servers[str(name)] = ModelServer(str(name), base_url, key_env)
    return servers


def has_credentials(url: str) -> bool:
    """Whether `url` carries a user name or password (`https://user:pass@host`). The
    upstream client sends the server's key as a bearer token and refuses a URL that brings
    its own credentials besides, so such a URL would fail every call to its model; and the
    catalog, which may be logged, must never hold a secret."""
    return "@" in urlsplit(url).netloc


def _model(entry: Any, index: int, servers: Mapping[str, ModelServer],
           defaults: ModelDefaults) -> ModelSpec:
    if not isinstance(entry, Mapping):
        raise ModelsFileError(f"models entry {index + 1} must be a table")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ModelsFileError(f"models entry {index + 1}: field 'name' must be a non-empty string")
    where = f"model '{name}'"
    if extra := set(entry) - _MODEL_FIELDS:
        raise ModelsFileError(f"{where}: field '{sorted(extra)[0]}' is unknown")
    server = servers.get(str(entry.get("server")))
    if server is None:
        raise ModelsFileError(
            f"{where}: field 'server' names {_quoted(entry.get('server'))}, which is no "
            f"[servers] table; the tables are {_listed(servers)}")
    spec = _spec(name, server, _text(entry, "model_id", where, name), defaults)
    changes: dict[str, Any] = {}
    for key in ("max_tokens", "max_retries"):
        if key in entry:
            changes[key] = _number(entry, key, where, integer=True)
    for key in ("temperature", "connect_timeout_s", "first_token_timeout_s", "read_timeout_s",
                "max_answer_s"):
        if key in entry:
            changes[key] = _number(entry, key, where, integer=False)
    if "prices" in entry:
        changes["prices"] = _prices(entry["prices"], where)
    for name, formats in (("reasoning_format", REASONING_FORMATS),
                           ("tool_format", TOOL_FORMATS)):
        if name in entry:
            fmt = _text(entry, name, where, "")
            if fmt not in formats:
                raise ModelsFileError(
                    f"{where}: field '{name}' must be one of {', '.join(formats)}")
            changes[name] = fmt
    for name in ("reasoning_tag", "tool_tag"):
        if name in entry:
            tag = _text(entry, name, where, "")
            if not _TAG_NAME.match(tag):
                raise ModelsFileError(
                    f"{where}: field '{name}' must be letters, digits, '-' and '_'")
            changes[name] = tag
    if "continuation" in entry:
        if not isinstance(entry["continuation"], bool):
            raise ModelsFileError(f"{where}: field 'continuation' must be true or false")
        changes["continuation"] = entry["continuation"]
    if "fallbacks" in entry:
        fallbacks = entry["fallbacks"]
        if not isinstance(fallbacks, list) or not all(isinstance(f, str) for f in fallbacks):
            raise ModelsFileError(f"{where}: field 'fallbacks' must be a list of model names")
        changes["fallbacks"] = tuple(f for f in fallbacks if f != name)
        if changes["fallbacks"]:
            # the fallback is the retry: a model with somewhere else to go goes there at once
            changes.setdefault("max_retries", 0)
    return replace(spec, **changes)


def _text(entry: Mapping[str, Any], key: str, where: str, default: str) -> str:
    value = entry.get(key, default)
    if not isinstance(value, str) or not value:
        raise ModelsFileError(f"{where}: field '{key}' must be a non-empty string")
    return value


def _number(entry: Mapping[str, Any], key: str, where: str, *, integer: bool) -> Any:
    value = entry[key]
    zero_ok = key in ("max_retries", "temperature")
    number = (isinstance(value, int) if integer else isinstance(value, int | float))
    if isinstance(value, bool) or not number or value < 0 or (value == 0 and not zero_ok):
        kind = "a whole number" if integer else "a number"
        raise ModelsFileError(
            f"{where}: field '{key}' must be {kind} {'of 0 or more' if zero_ok else 'above 0'}")
    return value


def _prices(raw: Any, where: str) -> tuple[float, float]:
    if not isinstance(raw, Mapping) or set(raw) != {"prompt", "completion"} or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
            for v in raw.values()):
        raise ModelsFileError(
            f"{where}: field 'prices' must be {{prompt = USD/M, completion = USD/M}}")
    return float(raw["prompt"]), float(raw["completion"])
