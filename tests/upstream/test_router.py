"""The model router: the next model at once after a failure another server could fix, the
request's own 4xx raised as it is, and cooldowns on an injected clock."""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

import pytest

from app.config.catalog import ModelDefaults, parse_catalog
from app.upstream import UpstreamClient, UpstreamError
from app.upstream.router import Attempt, ModelRouter

CATALOG = parse_catalog({
    "servers": {"a": {"base_url": "http://a/v1"}, "b": {"base_url": "http://b/v1"},
                "c": {"base_url": "http://c/v1"}},
    "models": [{"name": "first", "server": "a", "fallbacks": ["second", "third"]},
               {"name": "second", "server": "b"}, {"name": "third", "server": "c"}],
}, ModelDefaults())


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime(2026, 11, 28, 4, 0, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


class Report:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def server_request(self, server: str) -> None:
        self.events.append(("request", server))

    def server_failure(self, server: str, code: str) -> None:
        self.events.append(("failure", server, code))

    def server_cooling(self, server: str, until_unix: float) -> None:
        self.events.append(("cooling", server, until_unix))

    def fallback(self, from_model: str, to_model: str) -> None:
        self.events.append(("fallback", from_model, to_model))

    def continuation(self, from_model: str, to_model: str) -> None:
        self.events.append(("continuation", from_model, to_model))


def router(clock: Clock, report: Report | None = None) -> ModelRouter:
    clients = {name: cast(UpstreamClient, name) for name in ("first", "second", "third")}
    return ModelRouter(CATALOG, clients, clock=clock, report=report, failures_to_cool=2,
                       cooldown_first_s=10, cooldown_max_s=25)


def answering(failures: dict[str, UpstreamError]) -> Any:
    """A send that fails for the clients named in `failures` and answers the others."""
    async def send(client: UpstreamClient) -> str:
        name = cast(str, client)
        if name in failures:
            raise failures[name]
        return f"stream of {name}"
    return send


async def test_a_429_moves_on_at_once_and_cools_the_server_for_its_retry_after() -> None:
    clock, report = Clock(), Report()
    models = router(clock, report)
    attempts: list[Attempt] = []
    limited = UpstreamError("upstream_error", http_status=429, retry_after_s=30)
    spec, stream = await models.open(CATALOG.chain("first"), answering({"first": limited}),
                                     attempts)
    assert (spec.name, stream) == ("second", "stream of second")
    assert [(a.spec.name, a.error.http_status) for a in attempts] == [("first", 429)]
    assert ("fallback", "first", "second") in report.events
    state = {s["server"]: s for s in models.state()}
    assert state["a"]["state"] == "cooling_down"
    assert state["a"]["cooldown_until"] == "2026-11-28T04:00:30.000Z"
    assert state["b"] == {"server": "b", "state": "healthy", "cooldown_until": None,
                          "requests": 1, "failures": 0}
    # while it cools, its model is tried last
    assert [s.name for s in models.ordered(CATALOG.chain("first"))] == [
        "second", "third", "first"]
    clock.advance(30)
    assert [s.name for s in models.ordered(CATALOG.chain("first"))] == [
        "first", "second", "third"]


async def test_failures_in_a_row_cool_down_with_backoff() -> None:
    clock = Clock()
    models = router(clock)
    down = UpstreamError("upstream_unavailable")
    chain = CATALOG.chain("first")
    for _ in range(2):
        await models.open(chain, answering({"first": down}), [])
    assert models.health["a"].cooldown_until == clock.now + dt.timedelta(seconds=10)
    clock.advance(10)
    await models.open(chain, answering({"first": down}), [])
    assert models.health["a"].cooldown_until == clock.now + dt.timedelta(seconds=20)
    clock.advance(20)
    await models.open(chain, answering({"first": down}), [])
    assert models.health["a"].cooldown_until == clock.now + dt.timedelta(seconds=25)  # max
    clock.advance(25)
    spec, _ = await models.open(chain, answering({}), [])
    assert spec.name == "first" and models.health["a"].failures_in_a_row == 0


async def test_a_4xx_of_the_request_itself_is_not_retried() -> None:
    models = router(Clock())
    attempts: list[Attempt] = []
    refused = UpstreamError("upstream_error", http_status=400)
    with pytest.raises(UpstreamError) as raised:
        await models.open(CATALOG.chain("first"), answering({"first": refused}), attempts)
    assert raised.value is refused and len(attempts) == 1
    for status in (408, 409, 500, 503):
        retried = UpstreamError("upstream_error", http_status=status)
        spec, _ = await models.open(CATALOG.chain("first"), answering({"first": retried}), [])
        assert spec.name == "second"


async def test_every_model_failing_raises_the_last_failure() -> None:
    models = router(Clock())
    attempts: list[Attempt] = []
    errors = {name: UpstreamError("upstream_timeout") for name in ("first", "second", "third")}
    with pytest.raises(UpstreamError) as raised:
        await models.open(CATALOG.chain("first"), answering(errors), attempts)
    assert raised.value is errors["third"]
    assert [a.spec.name for a in attempts] == ["first", "second", "third"]


async def test_a_continuation_goes_to_the_next_model_then_the_same() -> None:
    clock, report = Clock(), Report()
    models = router(clock, report)
    chain = CATALOG.chain("first")
    assert [s.name for s in models.continuation_chain(chain, chain[0])] == [
        "second", "third", "first"]
    assert [s.name for s in models.continuation_chain(chain, chain[2])] == ["third"]
    spec, _ = await models.open(models.continuation_chain(chain, chain[0]), answering({}), [],
                                continuing=chain[0])
    assert spec.name == "second" and ("continuation", "first", "second") in report.events
