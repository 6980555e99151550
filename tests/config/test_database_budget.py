"""A host's workers' PostgreSQL connections against what the server allows: the pool each
worker gets when the operator set none, and the sentence of a deployment that cannot fit."""

from __future__ import annotations

import pytest

from app.config.database_budget import (
    ConnectionPlan,
    ServerConnections,
    derived_pool_size,
    fit_problem,
)
from app.config.settings import Settings

#: PostgreSQL's defaults: max_connections 100, 3 kept for superusers.
DEFAULT_SERVER = ServerConnections(max_connections=100, superuser_reserved=3)


@pytest.mark.parametrize("workers", [1, 2, 4, 8, 16, 32, 64])
def test_the_derived_pools_of_any_worker_count_fit_a_default_server(workers: int) -> None:
    pool = Settings(_env_file=None, workers=workers).database_pool_size  # type: ignore[call-arg]
    assert pool == derived_pool_size(workers)
    plan = ConnectionPlan(workers=workers, pool_size=pool)
    if workers <= 32:  # past that even the smallest pools cannot fit 97 connections
        assert fit_problem(plan, DEFAULT_SERVER) is None, plan


def test_one_process_keeps_the_whole_pool_and_an_explicit_size_wins() -> None:
    assert Settings(_env_file=None).database_pool_size == 20  # type: ignore[call-arg]
    explicit = Settings(_env_file=None, workers=8, database_pool_size=30)  # type: ignore[call-arg]
    assert explicit.database_pool_size == 30


def test_a_deployment_that_cannot_fit_is_one_sentence_with_the_numbers_and_the_fix() -> None:
    plan = ConnectionPlan(workers=8, pool_size=20, max_overflow=5)
    server = ServerConnections(max_connections=100, superuser_reserved=3, reserved=2)
    assert fit_problem(plan, server) == (
        "8 worker(s) x (20 pooled + 5 overflow + 1 listening) = 208 PostgreSQL connections, "
        "but the server allows 95 (max_connections 100 less 3 reserved for superusers and 2 "
        "by reserved_connections): set CHATGATE_DATABASE_POOL_SIZE to at most 5 (or lower "
        "CHATGATE_DATABASE_MAX_OVERFLOW), raise max_connections, or put PgBouncer in front "
        "(docs/production.md)")
    assert fit_problem(ConnectionPlan(workers=8, pool_size=5, max_overflow=5), server) is None
