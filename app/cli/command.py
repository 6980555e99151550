"""`chatgate`: one command for what an operator does, installed into the virtual
environment's bin (pyproject's console script), so that `chatgate keys list` works wherever
the environment is active, and `.venv/bin/chatgate keys list` wherever it is not.

    chatgate serve [--host H] [--port P] [--demo-port D] [--prepare-only [--no-migrate]]
    chatgate migrate [--database-url URL]
    chatgate keys create|list|revoke|budget|models ...
    chatgate usage report|backfill|verify ...
    chatgate repair scan|fix|rollback|runs ...
    chatgate replay [replay] --message-id ID | --file F;  chatgate replay export ...

Each subcommand is the same code as the script it replaces (`scripts/serve`,
`scripts/keys.py`, `scripts/usage.py`, `scripts/repair_messages.py`,
`scripts/replay_stream.py`, which run it too), with the same options and exit statuses."""

from __future__ import annotations

import sys

import typer

from app.cli import keys, repair, replay, resolve_database_url, run_cli, usage

cli = typer.Typer(help="Chatgate, the streaming chat gateway: serve it and operate it.",
                  no_args_is_help=True, add_completion=False)
cli.add_typer(keys.cli, name="keys")
cli.add_typer(usage.cli, name="usage")
cli.add_typer(repair.cli, name="repair")
cli.add_typer(replay.cli, name="replay",
              help="Replay a traced stream through the MarkerFilter (`replay` is the default "
                   "command: `chatgate replay --message-id ID`).")

#: serve's own options are parsed by app.gateway.serve (argparse), passed on as they are.
PASS_ON = {"allow_extra_args": True, "ignore_unknown_options": True,
           "help_option_names": []}


@cli.command(context_settings=PASS_ON)
def serve(ctx: typer.Context) -> None:
    """Check the settings, migrate the database, run the gateway (see serve --help).

    The demo model server starts with it when no model server is configured, or when the
    models file names it."""
    from app.gateway.serve import main as serve_main

    serve_main(ctx.args, prog="chatgate serve")


@cli.command()
def migrate(database_url: str | None = typer.Option(
        None, "--database-url", help="defaults to CHATGATE_DATABASE_URL")) -> None:
    """Bring the database to the newest schema, as serve does first.

    For a deployment that migrates once, as a job, before its processes start."""
    from app.gateway.serve import migrate as migrate_to_head

    url = resolve_database_url(database_url)
    migrate_to_head(url)
    from app.config.database_urls import redacted

    typer.echo(f"migrated {redacted(url)} to the newest schema")


def main(argv: list[str] | None = None) -> None:
    """The console script. `serve` goes straight to app.gateway.serve, which checks the settings
    itself (once: the warnings of a misspelt variable are not said twice)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["serve"]:
        from app.gateway.serve import main as serve_main

        serve_main(args[1:], prog="chatgate serve")
        return
    if args[:1] == ["replay"]:
        args = ["replay", *replay.with_default_command(args[1:])]
    run_cli(cli, args, prog_name="chatgate")
