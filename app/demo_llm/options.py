"""Demo model server settings (`CHATGATE_DEMO_` prefix), separate from the gateway's."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class DemoSettings(BaseSettings):
    """Pace and limits of the demo model; tests pass small values directly."""

    model_config = SettingsConfigDict(env_prefix="CHATGATE_DEMO_", env_file=".env", extra="ignore")

    delay_ms: float = 15.0
    """Pause before each content delta."""
    think_ms: float = 30.0
    """Pause before each piece of the model's thinking (the `[think…]` scenarios): slower
    than the answer, so a page shows "Thinking…" a moment (about 2 s)."""
    slow_first_s: float = 5.0
    """Extra pause before the first content delta in the `[slow-first]` scenario."""
    model: str = "demo-1"
    """The model id `GET /v1/models` lists (any requested model name is accepted)."""
    record_limit: int = 200
    """How many request bodies `GET /v1/_debug/requests` keeps."""
    fail_status: int | None = None
    """Answer every chat request with this HTTP status (a failing server in tests)."""
    retry_after_s: float | None = None
    """The Retry-After of those failures."""
    abort_after: int | None = None
    """Cut every streamed answer after this many pieces, as a crashed server would (a
    continuation request is answered whole)."""
