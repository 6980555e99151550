"""API keys: create (the key is printed once and never stored), list, revoke.

    chatgate keys create --user alice [--admin] [--name laptop]
    chatgate keys list [--user alice]
    chatgate keys revoke KEY_ID
    chatgate keys budget KEY_ID [--tokens 100000] [--cost-usd 2.5] [--clear]
    chatgate keys models KEY_ID (--allow fast,smart | --all)

KEY_ID is the id `list` shows, or its first characters (at least 4) when no other key's id
starts with them.

A budget is per UTC day and checked, when a turn opens, against everything the key's user
used that day (all keys together): past it, turns are refused (429 `budget_exceeded`)
until midnight UTC. A key limited to some models (names of the models file) gets 403
`model_not_allowed` for any other.
"""

from __future__ import annotations

import asyncio
import sys
import uuid

import typer
from rich.table import Column, Table

from app.cli import FLAG, RunConsole, resolve_database_url
from app.core.user_ids import user_id_problem
from app.keys import repository as api_keys
from app.store.migrations import migrated_database

cli = typer.Typer(help="Manage Chatgate API keys.", no_args_is_help=True)
console = RunConsole()


async def create_key(url: str | None, user: str, name: str, admin: bool) -> tuple[str, str]:
    async with migrated_database(resolve_database_url(url)) as db:
        async with db.transaction() as session:
            row, plaintext = await api_keys.create_key(session, user, name, is_admin=admin)
        return str(row.id), plaintext


async def revoke_key(url: str | None, key_id: uuid.UUID) -> bool:
    async with (migrated_database(resolve_database_url(url)) as db,
                db.transaction() as session):
        return await api_keys.revoke_key(session, key_id)


async def set_budget(url: str | None, key_id: uuid.UUID, tokens: int | None,
                     cost_usd: float | None) -> bool:
    async with (migrated_database(resolve_database_url(url)) as db,
                db.transaction() as session):
        return await api_keys.set_budget(session, key_id, tokens=tokens, cost_usd=cost_usd)


async def set_models(url: str | None, key_id: uuid.UUID, models: list[str] | None) -> bool:
    async with (migrated_database(resolve_database_url(url)) as db,
                db.transaction() as session):
        return await api_keys.set_models(session, key_id, models)


def budget_text(tokens: int | None, cost_usd: float | None) -> str:
    """A key's daily budget as `list` shows it ("" for none)."""
    parts = ([f"{tokens} tokens"] if tokens is not None else []) + (
        [f"${cost_usd:g}"] if cost_usd is not None else [])
    return " / ".join(parts) + (" a day" if parts else "")


async def key_rows(url: str | None, user: str | None) -> list[list[str]]:
    async with migrated_database(resolve_database_url(url)) as db:
        async with db.transaction() as session:
            keys = await api_keys.list_keys(session, user)
        return [
            [str(k.id), k.user_id, k.name, k.key_prefix + "…", "yes" if k.is_admin else "",
             k.created_at.isoformat(timespec="seconds"),
             k.last_used_at.isoformat(timespec="seconds") if k.last_used_at else "",
             k.revoked_at.isoformat(timespec="seconds") if k.revoked_at else "",
             budget_text(k.daily_token_budget, k.daily_cost_budget_usd),
             ", ".join(k.allowed_models) if k.allowed_models is not None else ""]
            for k in keys
        ]


DbOption = typer.Option(None, "--database-url", help="defaults to CHATGATE_DATABASE_URL")


@cli.command()
def create(
    user: str = typer.Option(..., "--user", help="the user the key acts as"),
    admin: bool = typer.Option(False, "--admin", **FLAG, help="may read every user's usage"),
    name: str = typer.Option("default", "--name", help="a label to recognise the key"),
    database_url: str | None = DbOption,
) -> None:
    """Create a key and print it once (only its hash is stored)."""
    problem = user_id_problem(user)
    if problem is not None:  # the API's own rule: no key for a user no request could name
        console.print(f"error: --user {user!r}: {problem}", style="red", highlight=False)
        raise typer.Exit(2)
    key_id, plaintext = asyncio.run(create_key(database_url, user, name, admin))
    console.print(f"key id: {key_id}  user: {user}  admin: {admin}", highlight=False)
    console.print("API key (shown once, store it now):", style="bold")
    sys.stdout.write(plaintext + "\n")


@cli.command("list")
def list_(
    user: str | None = typer.Option(None, "--user"),
    database_url: str | None = DbOption,
) -> None:
    """List keys (never the keys themselves: id, user, prefix, dates, limits)."""
    rows = asyncio.run(key_rows(database_url, user))
    if console.width < WIDE_LISTING:
        print_records(rows)
        return
    # The id and prefix are what an operator copies into `revoke`: never shortened.
    table = Table(Column("id", no_wrap=True, min_width=36), *LIST_HEADERS[1:3],
                  Column("prefix", no_wrap=True), *LIST_HEADERS[4:])
    for row in rows:
        table.add_row(*row)
    console.print(table)


LIST_HEADERS = ("id", "user", "name", "prefix", "admin", "created", "last used", "revoked",
                "budget", "models")
#: Ten columns fit from here on; below it (80 columns, a pipe) a table would cut every
#: value to "…", so each key is a block of `name value` lines instead. An empty budget or
#: models column means no limit.
WIDE_LISTING = 170


def print_records(rows: list[list[str]]) -> None:
    for row in rows:
        for header, value in zip(LIST_HEADERS, row, strict=True):
            console.print(f"{header:<10} {value or '-'}", highlight=False, soft_wrap=True)
        console.print()


#: The shortest id prefix taken for a key id: shorter ones would match by accident.
MIN_PREFIX = 4


async def matching_key_ids(url: str | None, prefix: str) -> list[uuid.UUID]:
    async with migrated_database(resolve_database_url(url)) as db, db.transaction() as session:
        ids = await api_keys.key_ids(session)
    wanted = prefix.lower()
    return [key_id for key_id in ids if str(key_id).startswith(wanted)]


def parse_key_id(key_id: str, url: str | None) -> uuid.UUID:
    """A key's whole id, or the start of one (as `list` shows it, at least MIN_PREFIX
    characters) that no other key's id starts with; anything else is refused, exit 2,
    saying why."""
    try:
        return uuid.UUID(key_id)
    except ValueError:
        pass
    if len(key_id) < MIN_PREFIX or not all(c in "0123456789abcdef-" for c in key_id.lower()):
        console.print(f"not a key id: {key_id!r} (give the id `list` shows, or at least "
                      f"its first {MIN_PREFIX} characters)", style="red", highlight=False)
        raise typer.Exit(2)
    found = asyncio.run(matching_key_ids(url, key_id))
    if len(found) == 1:
        return found[0]
    if not found:
        console.print(f"no key id starts with {key_id}", style="red", highlight=False)
        raise typer.Exit(1)
    shown = ", ".join(str(k) for k in found[:5]) + (", ..." if len(found) > 5 else "")
    console.print(f"{key_id} is the start of {len(found)} key ids ({shown}): give more of it",
                  style="red", highlight=False)
    raise typer.Exit(2)


@cli.command()
def revoke(key_id: str, database_url: str | None = DbOption) -> None:
    """Revoke a key by id; requests with it then get 401."""
    parsed = parse_key_id(key_id, database_url)
    if not asyncio.run(revoke_key(database_url, parsed)):
        console.print(f"no live key {parsed}", style="red")
        raise typer.Exit(1)
    console.print(f"revoked {parsed}")


@cli.command()
def budget(
    key_id: str,
    tokens: int | None = typer.Option(None, "--tokens", min=1, help="tokens per UTC day"),
    cost_usd: float | None = typer.Option(None, "--cost-usd", min=0.000001,
                                          help="USD per UTC day (priced calls only)"),
    clear: bool = typer.Option(False, "--clear", **FLAG, help="remove the key's budget"),
    database_url: str | None = DbOption,
) -> None:
    """Set a key's daily budget (tokens and/or cost); past it, its turns get 429 until
    midnight UTC. The options given replace the key's whole budget."""
    parsed = parse_key_id(key_id, database_url)
    if clear == (tokens is not None or cost_usd is not None):
        console.print("give --tokens and/or --cost-usd, or --clear", style="red")
        raise typer.Exit(2)
    if not asyncio.run(set_budget(database_url, parsed, tokens, cost_usd)):
        console.print(f"no key {key_id}", style="red")
        raise typer.Exit(1)
    console.print(f"budget of {parsed}: {budget_text(tokens, cost_usd) or 'none'}",
                  highlight=False)


@cli.command()
def models(
    key_id: str,
    allow: str | None = typer.Option(None, "--allow",
                                     help="the models the key may use, comma-separated"),
    all_models: bool = typer.Option(False, "--all", **FLAG, help="every model (the default)"),
    database_url: str | None = DbOption,
) -> None:
    """Limit a key to some models (their names in the models file); any other is refused
    with 403 `model_not_allowed`, and a turn that names none uses the first it may."""
    parsed = parse_key_id(key_id, database_url)
    names = [n.strip() for n in (allow or "").split(",") if n.strip()]
    if all_models == bool(names):
        console.print("give --allow NAME[,NAME...] or --all", style="red")
        raise typer.Exit(2)
    if not asyncio.run(set_models(database_url, parsed, names or None)):
        console.print(f"no key {key_id}", style="red")
        raise typer.Exit(1)
    console.print(f"models of {parsed}: {', '.join(names) if names else 'all'}",
                  highlight=False)

