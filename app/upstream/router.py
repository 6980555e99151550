"""Several models on several model servers: which client answers a model, which model is
tried next when one fails before its first token, and which servers cool down.

    router = ModelRouter(catalog, clients, clock=utcnow, report=metrics)
    spec, stream = await router.open(router.catalog.chain("smart"), send, attempts)

A failure that another server could do better on (no connection, a timeout, 408/409/429,
5xx, an answer that is no event stream) moves the request to the next model of the list at
once; any other 4xx is the request's own fault and is raised as it is. A server's 429 with
Retry-After cools it down that long; `failures_to_cool` failures in a row cool it down
`cooldown_first_s`, doubling with each further failure up to `cooldown_max_s`. A cooling
server is tried only after every healthy one of the list. The clock is injected: tests move
time by hand."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from app.config.catalog import Catalog, ModelDefaults, ModelSpec, single_server_catalog
from app.core.clock import Clock, iso_utc, utcnow
from app.observe.logging import get_logger
from app.upstream.client import UpstreamClient
from app.upstream.errors import UpstreamError
from app.upstream.sending import RETRIED_STATUSES

log = get_logger("upstream.router")

T = TypeVar("T")
#: The longest a Retry-After may cool a server down.
RETRY_AFTER_MAX_S = 600.0
#: How long /readyz waits for a model server to answer, and keeps its answer.
REACH_TIMEOUT_S = 1.0
REACH_KEEP_S = 5.0


class RouterReport(Protocol):
    """Where the router's figures go (app.observe.metrics.GatewayMetrics)."""

    def server_request(self, server: str) -> None: ...
    def server_failure(self, server: str, code: str) -> None: ...
    def server_cooling(self, server: str, until_unix: float) -> None: ...
    def fallback(self, from_model: str, to_model: str) -> None: ...
    def continuation(self, from_model: str, to_model: str) -> None: ...


def worth_another_server(exc: UpstreamError) -> bool:
    """The failure is the server's (or the way to it), not the request's: a 4xx other than
    408, 409 and 429 would fail the same on any server."""
    status = exc.http_status
    return status is None or status in RETRIED_STATUSES or status >= 500


@dataclass
class ServerHealth:
    """One model server's record in this process."""

    name: str
    requests: int = 0
    failures: int = 0
    failures_in_a_row: int = 0
    cooldown_until: dt.datetime | None = None

    def cooling(self, now: dt.datetime) -> bool:
        return self.cooldown_until is not None and now < self.cooldown_until

    def as_json(self, now: dt.datetime) -> dict[str, Any]:
        cooling = self.cooling(now)
        assert self.cooldown_until is not None or not cooling
        return {"server": self.name,
                "state": "cooling_down" if cooling else "healthy",
                "cooldown_until": iso_utc(self.cooldown_until)
                if cooling and self.cooldown_until else None,
                "requests": self.requests, "failures": self.failures}


@dataclass(frozen=True)
class Attempt:
    """One request that failed before its first token: what its llm_calls row says."""

    spec: ModelSpec
    started_at: dt.datetime
    finished_at: dt.datetime
    error: UpstreamError


class ModelRouter:
    """The catalog's clients, one per model (over the one shared HTTP pool), and each
    server's health."""

    def __init__(self, catalog: Catalog, clients: Mapping[str, UpstreamClient], *,
                 clock: Clock = utcnow, report: RouterReport | None = None,
                 failures_to_cool: int = 3, cooldown_first_s: float = 5.0,
                 cooldown_max_s: float = 300.0) -> None:
        self.catalog = catalog
        self._clients = dict(clients)
        self._clock, self._report = clock, report
        self._failures_to_cool = failures_to_cool
        self._cooldown_first_s, self._cooldown_max_s = cooldown_first_s, cooldown_max_s
        self.health = {server.name: ServerHealth(server.name) for server in catalog.servers}
        #: Whether each server answered /readyz's question, and when it was asked.
        self._reach: dict[str, tuple[dt.datetime, bool]] = {}

    def client(self, model: str) -> UpstreamClient:
        return self._clients[model]

    def state(self) -> list[dict[str, Any]]:
        """Each server's state as this process's requests found it."""
        now = self._clock()
        return [health.as_json(now) for health in self.health.values()]

    async def checked_state(self, timeout_s: float = REACH_TIMEOUT_S) -> list[dict[str, Any]]:
        """Each server's state for /readyz, each server asked first whether it answers at
        all (at once, `timeout_s` at most): one that does not is `unreachable`, whatever
        this process's requests found, since its models' turns would fail on it. A server's
        answer is kept `REACH_KEEP_S`: a load balancer polling /readyz does not become a
        stream of requests to every model server."""
        now = self._clock()
        stale = [name for name, (at, _) in self._reach.items()
                 if (now - at).total_seconds() > REACH_KEEP_S]
        for name in stale:
            del self._reach[name]
        first = {spec.server.name: spec.name for spec in reversed(self.catalog.models)}
        asked = [name for name in self.health if name not in self._reach]
        answers = await asyncio.gather(*(self._clients[first[name]].reachable(timeout_s)
                                         for name in asked))
        for name, answer in zip(asked, answers, strict=True):
            self._reach[name] = (now, answer)
        states = self.state()
        for state in states:
            if not self._reach[state["server"]][1]:
                state["state"] = "unreachable"
        return states

    def ordered(self, chain: Sequence[ModelSpec]) -> list[ModelSpec]:
        """The chain with the cooling servers' models last (in their order)."""
        now = self._clock()
        healthy = [s for s in chain if not self.health[s.server.name].cooling(now)]
        return healthy + [s for s in chain if s not in healthy]

    def continuation_chain(self, chain: Sequence[ModelSpec], failed: ModelSpec
                           ) -> list[ModelSpec]:
        """Who finishes an answer `failed` broke off: the models after it in the list, then
        itself (after its backoff, if it is cooling: it is last)."""
        names = [s.name for s in chain]
        rest = list(chain[names.index(failed.name) + 1:]) if failed.name in names else []
        return self.ordered([*rest, failed])

    async def open(self, chain: Sequence[ModelSpec],
                   send: Callable[[UpstreamClient], Awaitable[T]],
                   attempts: list[Attempt], *, continuing: ModelSpec | None = None
                   ) -> tuple[ModelSpec, T]:
        """`send` to each model of `chain` (healthy servers first) until one answers; each
        failed try is appended to `attempts`. Raises the last failure when none answered,
        or at once a failure no other server would fix."""
        order = self.ordered(chain)
        previous = continuing
        for index, spec in enumerate(order):
            if previous is not None:
                if continuing is not None and index == 0:
                    self._count("continuation", previous, spec)
                else:
                    self._count("fallback", previous, spec)
            started = self._clock()
            self.sent(spec)
            try:
                result = await send(self._clients[spec.name])
            except UpstreamError as exc:
                self.failed(spec, exc)
                attempts.append(Attempt(spec, started, self._clock(), exc))
                if index == len(order) - 1 or not worth_another_server(exc):
                    raise
                previous = spec
                continue
            self.answered(spec)
            return spec, result
        raise AssertionError("a chain has at least one model")

    def _count(self, kind: str, previous: ModelSpec, spec: ModelSpec) -> None:
        log.info(f"model_{kind}", from_model=previous.name, to_model=spec.name,
                 server=spec.server.name)
        if self._report is not None:
            (self._report.continuation if kind == "continuation"
             else self._report.fallback)(previous.name, spec.name)

    def sent(self, spec: ModelSpec) -> None:
        self.health[spec.server.name].requests += 1
        if self._report is not None:
            self._report.server_request(spec.server.name)

    def answered(self, spec: ModelSpec) -> None:
        """The server answered with an event stream: its failures in a row are over."""
        health = self.health[spec.server.name]
        health.failures_in_a_row = 0
        if health.cooldown_until is not None and not health.cooling(self._clock()):
            health.cooldown_until = None
            if self._report is not None:
                self._report.server_cooling(spec.server.name, 0.0)
        log.info("model_attempt", model=spec.name, server=spec.server.name, outcome="answered")

    def failed(self, spec: ModelSpec, exc: UpstreamError) -> None:
        """A request to the server failed (before or during its answer): counted, and the
        server cools down when its answer asks for it or it keeps failing."""
        health = self.health[spec.server.name]
        health.failures += 1
        health.failures_in_a_row += 1
        log.info("model_attempt", model=spec.name, server=spec.server.name, outcome="failed",
                 code=exc.code, http_status=exc.http_status)
        if self._report is not None:
            self._report.server_failure(spec.server.name, exc.code)
        pause = self._cooldown_s(health, exc)
        if pause is None:
            return
        until = self._clock() + dt.timedelta(seconds=pause)
        if health.cooldown_until is None or until > health.cooldown_until:
            health.cooldown_until = until
        log.warning("model_server_cooling", server=spec.server.name,
                    until=iso_utc(health.cooldown_until),
                    failures_in_a_row=health.failures_in_a_row)
        if self._report is not None:
            self._report.server_cooling(spec.server.name, health.cooldown_until.timestamp())

    def _cooldown_s(self, health: ServerHealth, exc: UpstreamError) -> float | None:
        if exc.http_status == 429 and exc.retry_after_s is not None and exc.retry_after_s > 0:
            return min(exc.retry_after_s, RETRY_AFTER_MAX_S)
        beyond = health.failures_in_a_row - self._failures_to_cool
        if beyond < 0:
            return None
        return min(self._cooldown_first_s * 2.0 ** beyond, self._cooldown_max_s)


def single_model_router(client: UpstreamClient) -> ModelRouter:
    """One client as the only model (a shell built without a catalog: tests, scripts)."""
    catalog = single_server_catalog(client.base_url, [], client.model, ModelDefaults())
    return ModelRouter(catalog, {client.model: client})
