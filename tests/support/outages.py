"""Database outages a test can switch on and off without touching the shared server or any
other test's database.

PostgreSQL: the gateway reaches its own database through a TcpProxy; the outage cuts it
(connections reset, new ones refused). SQLite: another connection holds the write lock, so
every transaction of the gateway (each starts with BEGIN IMMEDIATE, and each authenticated
request writes last_used_at) fails after the gateway's busy timeout."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Protocol

from sqlalchemy.engine import make_url

from tests.support.tcp_proxy import running_proxy


class Outage(Protocol):
    """The database a gateway should use, and a switch."""

    gateway_url: str

    def start(self) -> None: ...
    def end(self) -> None: ...


class ProxiedPostgres:
    def __init__(self, url: str, proxy_port: int, cut: object, restore: object) -> None:
        self.gateway_url = make_url(url).set(port=proxy_port).render_as_string(
            hide_password=False)
        self._cut, self._restore = cut, restore

    def start(self) -> None:
        self._cut()  # type: ignore[operator]

    def end(self) -> None:
        self._restore()  # type: ignore[operator]


class LockedSqlite:
    def __init__(self, url: str) -> None:
        self.gateway_url = url
        self._path = make_url(url).database or ""
        self._holder: sqlite3.Connection | None = None

    def start(self) -> None:
        self._holder = sqlite3.connect(self._path, isolation_level=None, timeout=10)
        self._holder.execute("BEGIN EXCLUSIVE")

    def end(self) -> None:
        if self._holder is not None:
            self._holder.execute("ROLLBACK")
            self._holder.close()
            self._holder = None


@contextlib.contextmanager
def outage_for(backend: str, url: str) -> Iterator[Outage]:
    """The switchable outage for `url` (a database the test made)."""
    if backend == "sqlite":
        locked = LockedSqlite(url)
        try:
            yield locked
        finally:
            locked.end()
        return
    parsed = make_url(url)
    with running_proxy(parsed.host or "127.0.0.1", parsed.port or 5432) as proxy:
        yield ProxiedPostgres(url, proxy.port, proxy.cut, proxy.restore)
