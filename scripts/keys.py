"""API keys: create (the key is printed once and never stored), list, revoke.

    python scripts/keys.py create --user alice [--admin] [--name laptop]
    python scripts/keys.py list [--user alice]
    python scripts/keys.py revoke KEY_ID
    python scripts/keys.py budget KEY_ID [--tokens 100000] [--cost-usd 2.5] [--clear]
    python scripts/keys.py models KEY_ID (--allow fast,smart | --all)

A budget is per UTC day and checked, when a turn opens, against everything the key's user
used that day (all keys together): past it, turns are refused (429 `budget_exceeded`)
until midnight UTC. A key limited to some models (names of the models file) gets 403
`model_not_allowed` for any other.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Column, Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.cli import FLAG, resolve_database_url, run_cli
from app.keys import repository as api_keys
from app.store.migrations import migrated_database
from app.users import user_id_problem

cli = typer.Typer(help="Manage Chatgate API keys.", no_args_is_help=True)
console = Console()


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
    print(plaintext)


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


def parse_key_id(key_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(key_id)
    except ValueError:
        console.print(f"not a key id: {key_id}", style="red")
        raise typer.Exit(2) from None


@cli.command()
def revoke(key_id: str, database_url: str | None = DbOption) -> None:
    """Revoke a key by id; requests with it then get 401."""
    parsed = parse_key_id(key_id)
    if not asyncio.run(revoke_key(database_url, parsed)):
        console.print(f"no live key {key_id}", style="red")
        raise typer.Exit(1)
    console.print(f"revoked {key_id}")


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
    parsed = parse_key_id(key_id)
    if clear == (tokens is not None or cost_usd is not None):
        console.print("give --tokens and/or --cost-usd, or --clear", style="red")
        raise typer.Exit(2)
    if not asyncio.run(set_budget(database_url, parsed, tokens, cost_usd)):
        console.print(f"no key {key_id}", style="red")
        raise typer.Exit(1)
    console.print(f"budget of {key_id}: {budget_text(tokens, cost_usd) or 'none'}",
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
    parsed = parse_key_id(key_id)
    names = [n.strip() for n in (allow or "").split(",") if n.strip()]
    if all_models == bool(names):
        console.print("give --allow NAME[,NAME...] or --all", style="red")
        raise typer.Exit(2)
    if not asyncio.run(set_models(database_url, parsed, names or None)):
        console.print(f"no key {key_id}", style="red")
        raise typer.Exit(1)
    console.print(f"models of {key_id}: {', '.join(names) if names else 'all'}",
                  highlight=False)


if __name__ == "__main__":
    run_cli(cli)
