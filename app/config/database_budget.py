"""How many PostgreSQL connections a deployment opens, and whether the server can take them.

Every gateway process keeps its own pool (`CHATGATE_DATABASE_POOL_SIZE` connections, plus up
to `CHATGATE_DATABASE_MAX_OVERFLOW` opened for a burst) and, on PostgreSQL, one connection
more held for LISTEN by the thread events bus. uvicorn's workers are processes, so a host
running N workers opens N times that. A server that cannot take them all refuses the
connections past its `max_connections` (less those it keeps for superusers, and on
PostgreSQL 16 the `reserved_connections`) under load, as 503s in the middle of the day:
this module says so at start instead, in one sentence with the numbers and the fix.

It reads no settings and imports no store: the settings derive their defaults from it, and
the start (app.gateway.serve) checks the figures the server gave.
"""

from __future__ import annotations

from dataclasses import dataclass

#: A process's pool when nothing smaller is needed: enough for a few hundred concurrent
#: streams (no connection is held while a stream runs).
MAX_POOL_SIZE = 20
#: The fewest pooled connections a process is given: its heartbeat and sweep, a checkpoint
#: round and a turn's opening may all want one at once.
MIN_POOL_SIZE = 2
#: What the pools of one host's workers may take together when derived from the worker
#: count alone: PostgreSQL's default `max_connections` (100) less its 3 superuser slots,
#: less room for an operator's psql, a migration job and a monitoring agent.
HOST_CONNECTIONS = 80
#: The connection each process holds for LISTEN (the thread events bus) on PostgreSQL.
LISTEN_CONNECTIONS = 1


def derived_pool_size(workers: int) -> int:
    """Each worker's pool when the operator set none: the host's share divided among the
    workers, each keeping one for LISTEN; MAX_POOL_SIZE for one or two workers, 9 for 8."""
    share = HOST_CONNECTIONS // max(1, workers) - LISTEN_CONNECTIONS
    return max(MIN_POOL_SIZE, min(MAX_POOL_SIZE, share))


@dataclass(frozen=True, slots=True)
class ServerConnections:
    """What a PostgreSQL server allows, as it reports it (SHOW)."""

    max_connections: int
    superuser_reserved: int
    reserved: int = 0  # `reserved_connections`, PostgreSQL 16 and later

    @property
    def available(self) -> int:
        """The connections an ordinary role may open."""
        return max(0, self.max_connections - self.superuser_reserved - self.reserved)

    def describe(self) -> str:
        reserved = f"{self.superuser_reserved} reserved for superusers"
        if self.reserved:
            reserved += f" and {self.reserved} by reserved_connections"
        return f"max_connections {self.max_connections} less {reserved}"


@dataclass(frozen=True, slots=True)
class ConnectionPlan:
    """What one host's gateway processes open: per process, its pool, its overflow and
    its LISTEN connection (0 where no process listens on this server)."""

    workers: int
    pool_size: int
    max_overflow: int = 0
    listen: int = LISTEN_CONNECTIONS

    @property
    def per_process(self) -> int:
        return self.pool_size + self.max_overflow + self.listen

    @property
    def total(self) -> int:
        return self.workers * self.per_process

    def largest_pool(self, available: int) -> int:
        """The largest pool size that fits `available` with this plan's workers, overflow and
        LISTEN connection (0: none does)."""
        return max(0, available // self.workers - self.max_overflow - self.listen)


def _fix(plan: ConnectionPlan, available: int) -> str:
    """What to set so that the plan fits: a smaller pool, without overflow if need be, or
    fewer workers."""
    fits = plan.largest_pool(available)
    if fits >= MIN_POOL_SIZE:
        overflow = " (or lower CHATGATE_DATABASE_MAX_OVERFLOW)" if plan.max_overflow else ""
        return f"set CHATGATE_DATABASE_POOL_SIZE to at most {fits}{overflow}"
    fits = ConnectionPlan(plan.workers, plan.pool_size, 0, plan.listen).largest_pool(available)
    if plan.max_overflow and fits >= MIN_POOL_SIZE:
        return ("set CHATGATE_DATABASE_MAX_OVERFLOW to 0 and CHATGATE_DATABASE_POOL_SIZE to "
                f"at most {fits}")
    return "run fewer CHATGATE_WORKERS"


def fit_problem(plan: ConnectionPlan, server: ServerConnections) -> str | None:
    """None when the plan fits the server, else the sentence an operator reads: the
    numbers on both sides and what to change."""
    if plan.total <= server.available:
        return None
    parts = f"{plan.pool_size} pooled + {plan.max_overflow} overflow"
    if plan.listen:
        parts += f" + {plan.listen} listening"
    fix = _fix(plan, server.available)
    return (f"{plan.workers} worker(s) x ({parts}) = {plan.total} PostgreSQL connections, "
            f"but the server allows {server.available} ({server.describe()}): {fix}, "
            "raise max_connections, or put PgBouncer in front (docs/production.md)")
