"""scripts/keys.py as an operator runs it (its command line on the gateway's own database,
SQLite and PostgreSQL; run in this process: tests/support/scripts.py): the key it prints
works, `list` never shows it, `revoke` locks it out, and
`--admin` is what opens the admin routes."""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Iterator, Mapping

import pytest

from tests.e2e.helpers import new_thread
from tests.support.databases import drop_database, make_fresh_database_url
from tests.support.gateway import LiveGateway, post_turn
from tests.support.scripts import run_script

KEY_LINE = re.compile(r"^cg_[A-Za-z0-9_-]{20,}$", re.MULTILINE)
KEY_ID = re.compile(r"key id: ([0-9a-f-]{36})")


def keys_cli(
    database_url: str, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """scripts/keys.py on a database (CHATGATE_DATABASE_URL, as documented), on a wide
    terminal unless `env` says otherwise."""
    return run_script("keys.py", *args, env={"CHATGATE_DATABASE_URL": database_url,
                                             "COLUMNS": "200", **(env or {})})


def create_key(database_url: str, user: str, *extra: str) -> tuple[str, str]:
    """(key id, plaintext key) from `create`; the key is printed exactly once."""
    done = keys_cli(database_url, "create", "--user", user, *extra)
    assert done.returncode == 0, done.stdout + done.stderr
    keys = KEY_LINE.findall(done.stdout)
    assert len(keys) == 1, f"expected the key printed once: {done.stdout!r}"
    key_id = KEY_ID.search(done.stdout)
    assert key_id is not None, done.stdout
    return key_id.group(1), keys[0]


@pytest.fixture
def sqlite_url() -> Iterator[str]:
    """A fresh migrated SQLite database, for what does not depend on the backend."""
    url = make_fresh_database_url("sqlite")
    yield url
    drop_database(url)


def unique(user: str) -> str:
    return f"{user}-{uuid.uuid4().hex[:8]}"


async def test_created_key_works_is_never_listed_and_revoke_locks_it_out(
    gateway: LiveGateway,
) -> None:
    user = unique("alice")
    key_id, key = create_key(gateway.database_url, user)

    async with gateway.client(key) as client:
        listed = await client.get("/api/threads")
        assert listed.status_code == 200, listed.text
        assert listed.json() == {"threads": []}
        forbidden = await client.get("/api/admin/usage", params={"user_id": user})
        assert forbidden.status_code == 403
        assert forbidden.json()["error"]["code"] == "forbidden"

        revoked = keys_cli(gateway.database_url, "revoke", key_id)
        assert revoked.returncode == 0, revoked.stdout + revoked.stderr
        assert f"revoked {key_id}" in revoked.stdout

        refused = await client.get("/api/threads")
        assert refused.status_code == 401
        assert refused.headers["content-type"].startswith("application/json")
        assert refused.json()["error"]["code"] == "unauthorized"
        assert refused.json()["error"]["message"]

    listing = keys_cli(gateway.database_url, "list", "--user", user)
    assert listing.returncode == 0, listing.stdout + listing.stderr
    assert key_id in listing.stdout
    assert key[:10] in listing.stdout  # the prefix, to recognise the key by
    assert key[:11] not in listing.stdout  # ...and not one character more
    row = next(line for line in listing.stdout.splitlines() if key_id in line)
    assert user in row
    # the revoked column, then the (empty) budget and models columns
    assert re.search(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\+00:00\s*│\s*│\s*│\s*$", row), (
        f"the revoked column should hold the revocation time: {row!r}")

    again = keys_cli(gateway.database_url, "revoke", key_id)
    assert again.returncode == 1
    assert "no live key" in again.stdout


def test_revoke_refuses_what_is_not_a_key_id(sqlite_url: str) -> None:
    done = keys_cli(sqlite_url, "revoke", "cg_not-an-id")
    assert done.returncode == 2
    assert "not a key id" in done.stdout


async def test_admin_key_reads_another_users_usage(gateway: LiveGateway) -> None:
    user = unique("bob")
    _, user_key = create_key(gateway.database_url, user)
    _, admin_key = create_key(gateway.database_url, unique("ops"), "--admin")

    async with gateway.client(user_key) as client:
        thread_id = await new_thread(client)
        result = await post_turn(client, thread_id, "hello there")
        assert result.one("message_end")["status"] == "complete"
        own = (await client.get("/api/usage")).json()
        refused = await client.get("/api/admin/usage", params={"user_id": user})
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "forbidden"

    async with gateway.client(admin_key) as admin:
        seen = await admin.get("/api/admin/usage", params={"user_id": user})
    assert seen.status_code == 200, seen.text
    report = seen.json()
    assert report["user_id"] == user
    assert report["totals"]["total_tokens"] > 0
    assert report["totals"] == own["totals"]


def test_admin_is_a_flag_that_takes_no_value(sqlite_url: str) -> None:
    """`--admin` alone makes an admin key; `--admin false` is refused, not read as admin,
    and the help shows no value to give."""
    user = unique("ops")
    create_key(sqlite_url, user, "--admin")
    listed = keys_cli(sqlite_url, "list", "--user", user)
    assert re.search(rf"{user}\s.*\syes\s", listed.stdout), listed.stdout
    refused = keys_cli(sqlite_url, "create", "--user", unique("ops"), "--admin", "false")
    assert refused.returncode == 2
    assert "unexpected extra argument" in refused.stdout + refused.stderr
    shown = keys_cli(sqlite_url, "create", "--help")
    admin_line = next(line for line in shown.stdout.splitlines() if "--admin" in line)
    assert "<bool>" not in admin_line and "may read every user's usage" in admin_line


def test_list_shows_every_value_whole_on_an_80_column_terminal(sqlite_url: str) -> None:
    key_id, plaintext = create_key(sqlite_url, "carol-from-the-night-shift", "--name",
                                   "a laptop with a long name")
    listing = keys_cli(sqlite_url, "list", env={"COLUMNS": "80"})
    assert listing.returncode == 0, listing.stdout + listing.stderr
    for value in (key_id, "carol-from-the-night-shift", "a laptop with a long name"):
        assert value in listing.stdout, listing.stdout
    prefix = re.search(r"^prefix\s+(cg_\S+)…$", listing.stdout, re.MULTILINE)
    assert prefix is not None and plaintext.startswith(prefix.group(1)), listing.stdout
    assert plaintext not in listing.stdout


@pytest.mark.parametrize("user", ["", " ", "a\tb", "x" * 300, "nul\x00"])
def test_create_refuses_a_user_id_the_api_would_refuse(sqlite_url: str, user: str) -> None:
    done = keys_cli(sqlite_url, "create", "--user", user.replace("\x00", "\x01"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "a user id" in done.stdout + done.stderr and "Traceback" not in done.stderr
    assert not KEY_LINE.search(done.stdout)
    listing = keys_cli(sqlite_url, "list")
    assert listing.stdout.count("cg_") == 0, listing.stdout
