"""Gateway settings: one `CHATGATE_` prefix, read from the environment and `.env`."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.answer.pricing import load_price_table
from app.config.catalog import has_credentials
from app.config.database_budget import MAX_POOL_SIZE, derived_pool_size
from app.config.database_urls import database_url_problem, runs_postgres
from app.config.fencing import derived_fence_after, fence_problem
from app.stream import (  # the splits' own formats (pydantic names them)
    ReasoningFormat,
    ToolFormat,
)

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant. The user's message may start with an HTML comment "
    "<!-- MSG_CONTEXT: {...} --> that holds the conversation so far; use it, never repeat it. "
    "Answer the user, then on a new line append exactly one comment of the form "
    '<!-- METADATA: {"language": "<ISO 639-1 code>", "sources": [<URLs you used>], '
    '"awaiting": "question"|"decision"|"task"|null} --> '
    "where awaiting says whether you are waiting for the user to answer a question, make a "
    "decision or finish a task."
)

#: A reasoning tag's name: what may stand between `<` and `>` with nothing to escape.
REASONING_TAG = re.compile(r"[A-Za-z0-9_-]+")


#: The key sent to a model server that needs none (the OpenAI SDK insists on one): no secret.
NO_KEY = "not-needed"

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class SettingRefused(ValueError):
    """A value a validator refuses: `allowed` says what the setting must be (the sentence
    `CHATGATE_X must be <allowed>, not '<value>'`, app.gateway.startup), `reason` why this one is
    not, when the value alone does not show it (a file that does not exist)."""

    def __init__(self, allowed: str, reason: str | None = None, *,
                 shown: str | None = None) -> None:
        super().__init__(allowed if reason is None else f"{allowed} ({reason})")
        self.allowed = allowed
        self.reason = reason
        #: The value as the sentence may quote it, when the value itself must not be
        #: repeated (it holds a secret); None: the value as given.
        self.shown = shown


def _http_url(value: str) -> bool:
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.hostname) and " " not in value


def without_credentials(url: str) -> str:
    """`url` with whatever stands before `@` in its host part (a user name, a password)
    written `***`: what an error may quote of a URL that holds credentials."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl()


class Settings(BaseSettings):
    """Everything an operator can set; see the configuration table in README.md."""

    model_config = SettingsConfigDict(
        env_prefix="CHATGATE_", env_file=".env", extra="ignore", populate_by_name=True
    )

    database_url: str = Field(
        default="sqlite+aiosqlite:///./var/chatgate.db",
        validation_alias=AliasChoices("CHATGATE_DATABASE_URL", "DATABASE_URL", "database_url"),
    )
    upstream_base_url: str | None = None
    upstream_api_key: str = NO_KEY
    upstream_model: str = "demo-1"
    #: The models the OpenAI-compatible endpoint offers (`/v1/models`), comma-separated; each
    #: is sent upstream by name. Empty: the one `upstream_model`.
    models: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: A TOML file of model servers and the models users pick (app.config.catalog); unset: the
    #: one model server above, with the names of `models`.
    models_file: str | None = None
    #: Where the models file's `base_url = "demo"` servers are: scripts/serve sets it to the
    #: demo model server it starts (set it by hand only for a demo server run elsewhere).
    demo_base_url: str | None = None
    #: How the model server's answers carry the model's thinking inline (spec v1.2,
    #: "Reasoning"): `think`, a leading <think>...</think> block; `think-prefilled`, the chat
    #: template put the opener into the prompt, so the answer starts inside the thinking and
    #: closes it with </think>; `none`, the content is all answer. A `reasoning_content`
    #: (or `reasoning`) delta field is reasoning whatever this says.
    reasoning_format: ReasoningFormat = "think"
    #: The tag's name (`think`: <think> and </think>): letters, digits, `-` and `_`.
    reasoning_tag: str = "think"
    #: How the model server's answers carry tool calls the server did not parse (spec
    #: v1.3, "Inline tool calls"): `hermes`, each <tool_call>{"name": ..., "arguments":
    #: ...}</tool_call> block in the answer is a tool call (Hermes, Qwen 2.5 and 3 behind
    #: a server without a tool parser); `none`, the answer's text is all text. A model
    #: server's own `tool_calls` deltas are tool calls whatever this says.
    tool_format: ToolFormat = "none"
    #: The tag's name (`tool_call`: <tool_call> and </tool_call>), as reasoning_tag.
    tool_tag: str = "tool_call"
    upstream_temperature: float = 0.7
    upstream_max_tokens: int = 1024
    upstream_connect_timeout_s: float = 5.0
    first_token_timeout_s: float = 30.0
    #: The longest a streamed answer may take, from its request to its end: past it the
    #: answer ends `failed` (`answer_too_long`) with the text so far kept.
    max_answer_s: float = Field(default=600.0, gt=0)
    upstream_read_timeout_s: float = 60.0
    upstream_max_retries: int = 1
    #: Calls that may finish one answer after its model server failed mid-answer (each
    #: model of the models file may turn it off: `continuation = false`).
    max_continuations: int = Field(default=1, ge=0)
    #: Connections to the model server this process may hold: each turn holds one slot from
    #: before its first upstream call to its finish (its title/summary calls ride on it).
    upstream_pool_size: int = Field(default=200, ge=1)
    #: How long a turn waits for a free slot before it is answered 503 `gateway_busy`.
    upstream_slot_timeout_s: float = Field(default=2.0, ge=0)
    #: Turns of this process opening at once (from the slot to the main call's response
    #: headers); the others wait in line (app.turn.holds.opening_places).
    max_opening_turns: int = Field(default=512, ge=1)
    #: How long a turn waits in that line before it is answered 503 `gateway_busy`.
    opening_wait_s: float = Field(default=30.0, ge=0)

    #: Answers streaming at once per user (all keys and processes together); 0 = no cap.
    max_streams_per_user: int = Field(default=8, ge=0)
    #: Turn requests per user per minute (fixed window); 0 = no limit.
    rate_limit_per_minute: int = Field(default=120, ge=0)
    #: Count the rate limit in Redis (`redis://host:6379/0`) instead of the database.
    redis_url: str | None = None
    #: Prefix of every Redis key and channel of this gateway (several deployments, or tests,
    #: may share one Redis).
    redis_prefix: str = "chatgate"

    #: A turn whose client left keeps streaming this long for the client to resume it
    #: (GET .../messages/{id}/stream); then it is stored `interrupted`. 0: it ends at once.
    resume_grace_s: float = Field(default=30.0, ge=0)
    #: A finished turn's events stay resumable this long (with a grace).
    resume_log_keep_s: float = Field(default=300.0, ge=0)
    #: Events kept per turn (its deltas and a few more); older ones are dropped past it.
    resume_log_max_events: int = Field(default=20_000, ge=100)

    auth_mode: Literal["keys", "off"] = "keys"
    max_content_chars: int = 32_000
    context_budget_chars: int = 12_000
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    keepalive_s: float = 15.0
    #: A client that keeps its connection open but stops reading is dropped after this long
    #: blocked on one send, so its turn is stored (`interrupted`) and the upstream closed.
    sse_send_timeout_s: float = 30.0
    stale_streaming_after_s: float = 600.0
    #: Each process writes a heartbeat this often, and sweeps the streams of processes whose
    #: heartbeat is older than `process_dead_after_s` (docs/production.md: crash recovery).
    heartbeat_s: float = Field(default=2.0, gt=0)
    process_dead_after_s: float = Field(default=10.0, gt=0)
    #: PostgreSQL: a process whose heartbeat was not renewed for this long ends its own
    #: answers (`interrupted`, `database_unreachable`), before any other may take them over
    #: (app.config.fencing). Unset: half of `process_dead_after_s`.
    process_fence_after_s: float | None = Field(default=None, gt=0, validate_default=True)
    #: The partial text of running streams is written this often (one transaction for all
    #: of a process's streams): a crash loses at most this much of what clients saw.
    checkpoint_interval_s: float = 1.0
    #: How often open SSE streams are checked for a revoked API key (one query).
    revocation_check_s: float = 2.0
    #: `Retry-After` of a 503 `database_unavailable` answer.
    database_retry_after_s: int = 5
    #: SQLite only: how long a transaction waits for another writer before it fails (the
    #: only wait on a local file; a statement's bound on SQLite).
    sqlite_busy_timeout_s: float = Field(default=30.0, gt=0)
    #: PostgreSQL only: connections this process keeps open. A statement that finds all in
    #: use waits for one (`database_pool_timeout_s` at most; then opening a turn answers 503
    #: `gateway_busy`). Unset: derived from `workers` (app.config.database_budget: 20 for one or
    #: two workers, 9 for eight), so that a host's workers fit a default server.
    database_pool_size: int = Field(default=MAX_POOL_SIZE, ge=1)
    #: PostgreSQL only: connections a process may open beyond its pool for a burst, closed
    #: as soon as they are returned (each costs the server a new backend process).
    database_max_overflow: int = Field(default=0, ge=0)
    #: A direct PostgreSQL URL (not through a pooler) for the thread events bus's LISTEN
    #: connection: LISTEN does not work through PgBouncer's transaction pooling. With
    #: `database_pooler` it is required, and scripts/serve migrates and checks the server
    #: through it too. Unset: LISTEN on `database_url`.
    database_listen_url: str | None = None
    #: `pgbouncer`: `database_url` goes through PgBouncer (or another pooler) in transaction
    #: mode, so no statement is kept on the server (app.store.pooler).
    database_pooler: Literal["none", "pgbouncer"] = "none"
    #: Bounds on every wait for the database (app.store.db.DatabaseTimeouts), so that a
    #: database that stops answering without closing its sockets (a network partition) is a
    #: 503 `database_unavailable` after the bound, not a hang. PostgreSQL: a new connection
    #: (handshake included), each statement's answer; both: a free pooled connection.
    database_connect_timeout_s: float = Field(default=5.0, gt=0)
    database_statement_timeout_s: float = Field(default=10.0, gt=0)
    database_pool_timeout_s: float = Field(default=30.0, gt=0)
    #: uvicorn worker processes of scripts/serve and the Docker entry point (PostgreSQL only
    #: above 1: see app.gateway.serve.check_workers).
    workers: int = Field(default=1, ge=1, le=64)

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    #: `auto`: readable lines at a terminal, JSON lines otherwise (a container, a file).
    log_format: Literal["auto", "json", "console"] = "auto"
    trace_streams: Literal["off", "errors", "all"] = "errors"

    title_calls: bool = True
    price_file: str | None = None
    summary_calls: bool = True
    title_max_tokens: int = 24
    summary_max_tokens: int = 400
    side_call_timeout_s: float = 20.0

    autonomy_enabled: bool = False
    autonomy_idle_seconds: int = 300
    autonomy_max_followups: int = 2
    followup_poll_s: float = 1.0
    followup_lease_s: float = 120.0
    followup_max_attempts: int = 3

    @field_validator("reasoning_tag", mode="before")
    @classmethod
    def _plain_reasoning_tag(cls, value: Any) -> Any:
        """The tag is written into `<tag>` and `</tag>` as it is: nothing that would need
        escaping or could read as an attribute."""
        if not isinstance(value, str) or not REASONING_TAG.fullmatch(value):
            raise SettingRefused("a tag name of letters, digits, '-' and '_' (such as think)")
        return value

    @field_validator("tool_tag", mode="before")
    @classmethod
    def _plain_tool_tag(cls, value: Any) -> Any:
        """As the reasoning tag: written into `<tag>` and `</tag>` as it is."""
        if not isinstance(value, str) or not REASONING_TAG.fullmatch(value):
            raise SettingRefused(
                "a tag name of letters, digits, '-' and '_' (such as tool_call)")
        return value

    @field_validator("models", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value

    @field_validator("database_url")
    @classmethod
    def _supported_database(cls, value: str) -> str:
        problem = database_url_problem(value)
        if problem is not None:
            raise SettingRefused(problem)
        return value

    @field_validator("process_fence_after_s")
    @classmethod
    def _fence_before_takeover(cls, value: float | None, info: ValidationInfo) -> float | None:
        heartbeat, dead_after = info.data.get("heartbeat_s"), info.data.get("process_dead_after_s")
        if heartbeat is None or dead_after is None:  # refused themselves: said first
            return value
        fence = derived_fence_after(dead_after) if value is None else value
        problem = fence_problem(heartbeat_s=heartbeat, fence_after_s=fence,
                                dead_after_s=dead_after)
        if problem is not None:
            shown = None if value is not None else (
                f"{fence:g} (half of CHATGATE_PROCESS_DEAD_AFTER_S, when unset)")
            raise SettingRefused(problem, shown=shown)
        return fence

    @field_validator("database_listen_url", mode="before")
    @classmethod
    def _direct_postgres(cls, value: Any) -> Any:
        if value in ("", None):
            return None
        if (not isinstance(value, str) or database_url_problem(value) is not None
                or not runs_postgres(value)):
            raise SettingRefused("a PostgreSQL URL (postgresql+asyncpg://user@host:5432/name)",
                                 shown=without_credentials(str(value)))
        return value

    @field_validator("database_pooler")
    @classmethod
    def _listen_beside_the_pooler(cls, value: str, info: ValidationInfo) -> str:
        """Through a transaction pooler the events bus could not LISTEN: it goes through
        Redis, or a direct URL for it is part of the setting."""
        if (value != "none" and not info.data.get("database_listen_url")
                and not info.data.get("redis_url")):
            raise SettingRefused(
                "none unless CHATGATE_REDIS_URL is set (the events bus then goes through "
                "Redis) or CHATGATE_DATABASE_LISTEN_URL names a direct PostgreSQL URL for "
                "it (LISTEN does not work through transaction pooling)")
        return value

    @field_validator("upstream_base_url", mode="before")
    @classmethod
    def _upstream_is_http(cls, value: Any) -> Any:
        """Empty is unset (scripts/serve starts the demo model server); anything else must be
        a URL the OpenAI client can call, or every turn would fail on it: one with a user
        name and password in it fails every call too (the key is sent as a bearer token,
        and the client refuses a URL that brings credentials besides), so it is refused
        here without repeating them."""
        if value in ("", None):
            return None
        if isinstance(value, str) and not _http_url(value.strip()):
            raise SettingRefused("an http(s) URL such as https://api.openai.com/v1")
        if isinstance(value, str) and has_credentials(value.strip()):
            raise SettingRefused(
                "an http(s) URL without a user name and password (the key goes in "
                "CHATGATE_UPSTREAM_API_KEY)", shown=without_credentials(value.strip()))
        return value.strip() if isinstance(value, str) else value

    @field_validator("demo_base_url", mode="before")
    @classmethod
    def _demo_is_http(cls, value: Any) -> Any:
        if value in ("", None):
            return None
        if isinstance(value, str) and not _http_url(value.strip()):
            raise SettingRefused("an http(s) URL such as http://127.0.0.1:8001/v1")
        return value.strip() if isinstance(value, str) else value

    @field_validator("redis_url", mode="before")
    @classmethod
    def _redis_url(cls, value: Any) -> Any:
        if value in ("", None):
            return None
        if isinstance(value, str) and urlsplit(value).scheme not in ("redis", "rediss", "unix"):
            raise SettingRefused("a Redis URL such as redis://127.0.0.1:6379/0")
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _any_case_level(cls, value: Any) -> Any:
        """`info` is INFO; an unknown level stays as written, for the error to quote."""
        if isinstance(value, str) and value.strip().upper() in LOG_LEVELS:
            return value.strip().upper()
        return value

    @field_validator("price_file", mode="before")
    @classmethod
    def _readable_price_file(cls, value: Any) -> Any:
        """Read and parsed here as well as where the runtime builds its price table, so that
        a missing or malformed file stops the start (or a script) with its reason instead of
        the first priced turn."""
        if value in ("", None):
            return None
        if isinstance(value, str):
            allowed = "a readable JSON price file"
            if not Path(value).is_file():
                raise SettingRefused(allowed, "no such file")
            try:
                load_price_table(value)
            except OSError as error:
                raise SettingRefused(allowed, error.strerror or str(error)) from None
            except ValueError as error:  # not JSON, not UTF-8, not a table of prices
                raise SettingRefused(allowed, str(error)[:200]) from None
        return value

    @model_validator(mode="after")
    def _pool_of_the_workers(self) -> Settings:
        """The pool size derived from the worker count when the operator set none: every
        worker reads the same CHATGATE_WORKERS (scripts/serve and the Docker entry point
        export it), so each derives the same share."""
        if "database_pool_size" not in self.model_fields_set:
            object.__setattr__(self, "database_pool_size", derived_pool_size(self.workers))
        return self

    @property
    def offered_models(self) -> list[str]:
        """What `model` may name on the OpenAI-compatible endpoint."""
        return self.models or [self.upstream_model]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return Settings()
