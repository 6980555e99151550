"""What every turn needs of the process, built once by the application lifespan and handed
to each turn shell (the native turn, the OpenAI-style call, the follow-up worker's turn)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from app.answer.pricing import PriceTable
from app.config.settings import Settings
from app.store.db import Database
from app.stream import ReasoningFormat, ToolFormat
from app.turn.holds.checkpoints import Checkpointer
from app.turn.holds.opening_places import OpeningPlaces
from app.turn.holds.precedence import Precedence
from app.turn.holds.running import RunningAnswers
from app.turn.holds.slots import UpstreamSlots
from app.turn.observers.seam import TurnObserver
from app.turn.rows import TurnRows, turn_rows
from app.upstream import UpstreamClient
from app.upstream.router import ModelRouter, single_model_router


@dataclass
class TurnDeps:
    """The database, the model server, prices, settings, observers and this process's parts."""

    db: Database
    upstream: UpstreamClient
    prices: PriceTable
    settings: Settings
    observers: list[TurnObserver] = field(default_factory=list)
    #: None: no bound of this process's own (tests of the shell alone).
    slots: UpstreamSlots | None = None
    #: This process's id on the rows it streams (swept when its heartbeat stops).
    process_id: str | None = None
    #: Writes the partial text of running turns on its own schedule.
    checkpoints: Checkpointer | None = None
    #: Opening turns go first while the process is saturated (None: never).
    precedence: Precedence | None = None
    #: How many turns may be opening at once (None: no bound of this process's own).
    openings: OpeningPlaces | None = None
    #: The models and their servers (None: `upstream` is the one model).
    router: ModelRouter | None = None
    #: The answers running now, whatever API runs them: the fence ends them all.
    running: RunningAnswers = field(default_factory=RunningAnswers)
    #: Every write of a turn's rows, on `db`.
    rows: TurnRows = field(init=False)

    def __post_init__(self) -> None:
        self.rows = turn_rows(self.db)
        if self.router is None:
            self.router = single_model_router(self.upstream)

    @property
    def models(self) -> ModelRouter:
        assert self.router is not None
        return self.router

    def reasoning(self, model: str | None) -> tuple[ReasoningFormat, str]:
        """The reasoning format and tag name an answer of `model` is split with: the models
        file's entry where it says, else CHATGATE_REASONING_FORMAT and _TAG. A fallback or a
        continuation keeps the chosen model's: one answer is split one way."""
        spec = self.models.catalog.get(model) if model is not None else None
        fmt = spec.reasoning_format if spec is not None else None
        tag = spec.reasoning_tag if spec is not None else None
        return (cast(ReasoningFormat, fmt or self.settings.reasoning_format),
                tag or self.settings.reasoning_tag)

    def tool_calls(self, model: str | None) -> tuple[ToolFormat, str]:
        """The inline tool call format and tag name an answer of `model` is read with: the
        models file's entry where it says, else CHATGATE_TOOL_FORMAT and _TAG (kept across
        fallbacks and continuation, as the reasoning format is)."""
        spec = self.models.catalog.get(model) if model is not None else None
        fmt = spec.tool_format if spec is not None else None
        tag = spec.tool_tag if spec is not None else None
        return (cast(ToolFormat, fmt or self.settings.tool_format),
                tag or self.settings.tool_tag)
