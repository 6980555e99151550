"""A PgBouncer of the tests' own, in transaction mode, in front of the test PostgreSQL server:
its configuration in a temporary directory, on a port of its own, every database of the
server behind it (`*`), trust authentication. PgBouncer refuses to run as root, so under
root it runs as the `postgres` user. Debian's `pgbouncer` package provides it
(scripts/ensure_services.sh installs it); without it the tests that need it are skipped, or
fail when CHATGATE_REQUIRE_PGBOUNCER=1 (CI).

    with running_pgbouncer() as bouncer:
        url = bouncer.url_of(make_fresh_database_url("postgresql"))
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from tests.support.databases import PG_ADMIN_URL, require_postgres
from tests.support.gateway import free_port

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
START_TIMEOUT_S = 10.0
#: The test server's user: PgBouncer's one user (trust) and the admin of its console.
USER = make_url(PG_ADMIN_URL).username or "postgres"
#: Server connections per database and user: fewer than the clients' pools, so that clients
#: share server connections and a statement prepared on one meets another.
SERVER_POOL_SIZE = 8


def require_pgbouncer() -> None:
    require_postgres()
    if not Path(PGBOUNCER).is_file():
        message = "pgbouncer is not installed (apt-get install pgbouncer; scripts/test does)"
        if os.environ.get("CHATGATE_REQUIRE_PGBOUNCER") == "1":
            pytest.fail(message)
        pytest.skip(message)


class PgBouncer:
    """A running PgBouncer; `url_of` is a database URL of the server, through it."""

    def __init__(self, port: int, directory: Path, process: subprocess.Popen[bytes]) -> None:
        self.port, self.directory, self.process = port, directory, process

    def url_of(self, url: str) -> str:
        return make_url(url).set(host="127.0.0.1", port=self.port).render_as_string(
            hide_password=False)

    def log(self) -> str:
        path = self.directory / "pgbouncer.log"
        return path.read_text(errors="replace") if path.is_file() else ""

    def release(self, url: str) -> None:
        """Close PgBouncer's server connections to `url`'s database (its admin console's
        KILL, then RESUME for whoever comes next): a database nobody is connected to is
        emptied and reused by drop_database instead of dropped, which costs PostgreSQL far
        more (and a test's teardown seconds when the server is busy)."""
        name = make_url(url).database or ""
        asyncio.run(self._console(f'KILL "{name}"', f'RESUME "{name}"'))

    async def _console(self, *commands: str) -> None:
        console = await asyncpg.connect(host="127.0.0.1", port=self.port, user=USER,
                                        database="pgbouncer", statement_cache_size=0,
                                        timeout=5)
        try:
            for command in commands:  # the console speaks the simple query protocol only
                await console.execute(command)
        finally:
            await console.close()


def _config(directory: Path, port: int) -> str:
    server = make_url(PG_ADMIN_URL)
    return "\n".join([
        "[databases]",
        f"* = host={server.host or '127.0.0.1'} port={server.port or 5432}",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        f"listen_port = {port}",
        "unix_socket_dir =",
        "auth_type = trust",
        f"admin_users = {USER}",
        f"auth_file = {directory / 'users.txt'}",
        "pool_mode = transaction",
        "max_client_conn = 1000",
        f"default_pool_size = {SERVER_POOL_SIZE}",
        "server_reset_query =",
        f"logfile = {directory / 'pgbouncer.log'}",
        "",
    ])


def _as_postgres() -> dict[str, Any]:
    """PgBouncer will not run as root: under root, as the `postgres` user. Popen switches
    user itself rather than through `runuser`, whose SIGTERM handling waits 2 s before it
    returns (`Session terminated, killing shell...`): every stop would take that long."""
    if os.geteuid() != 0:
        return {}
    return {"user": "postgres", "group": "postgres", "extra_groups": []}


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def running_pgbouncer() -> Iterator[PgBouncer]:
    require_pgbouncer()
    directory = Path(tempfile.mkdtemp(prefix="cg-pgbouncer-"))
    port = free_port()
    (directory / "users.txt").write_text(f'"{USER}" ""\n')
    (directory / "pgbouncer.ini").write_text(_config(directory, port))
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres")
        for path in directory.iterdir():
            shutil.chown(path, "postgres")
    process = subprocess.Popen([PGBOUNCER, str(directory / "pgbouncer.ini")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               **_as_postgres())
    bouncer = PgBouncer(port, directory, process)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _listening(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not start:\n{bouncer.log()[-2000:]}")
            time.sleep(0.05)
        yield bouncer
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)
