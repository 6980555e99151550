"""Structured logs on stdout: JSON lines for machines (the default off a terminal), readable
columns for a person at a terminal. Context (request, user, thread, message ids) is bound
with structlog's contextvars so every line of a turn carries it without passing it around."""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog
from structlog.typing import EventDict, WrappedLogger

from app.observe.redaction import SECRETS

UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")

#: Tracebacks as JSON, without each frame's local variables: structlog shows them by default,
#: and on the turn path they hold the user's words, the model's answer and raw chunks, none
#: of which belongs in a log line.
TRACEBACKS = structlog.processors.ExceptionRenderer(
    structlog.tracebacks.ExceptionDictTransformer(show_locals=False))


LogFormat = Literal["auto", "json", "console"]


def redact_secrets(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """Every string of the line (its message, its fields, a rendered traceback) with the
    secrets the process knows and credential shapes replaced (app.observe.redaction): the last step
    before the renderer, so nothing a log shipper reads holds a key."""
    redacted: EventDict = SECRETS.value(event_dict)
    return redacted


def renders_json(log_format: LogFormat = "auto") -> bool:
    """`auto`: JSON unless stdout is a terminal (a person reading scripts/serve)."""
    if log_format == "auto":
        return not sys.stdout.isatty()
    return log_format == "json"


def configure_logging(level: str = "INFO", log_format: LogFormat = "auto") -> None:
    """Lines on stdout, stdlib loggers (uvicorn, alembic) routed through the same renderer."""
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor
    if renders_json(log_format):
        renderer = structlog.processors.JSONRenderer()
        tracebacks: list[structlog.types.Processor] = [TRACEBACKS]
    else:
        # A plain traceback as text, rendered before the redaction reads it (the console
        # renderer's own formatter would run after it, and print each frame's locals too).
        renderer = structlog.dev.ConsoleRenderer(colors=False)
        tracebacks = [structlog.processors.format_exc_info]
    structlog.configure(
        processors=[*shared, *tracebacks, redact_secrets, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                        *tracebacks, redact_secrets, renderer],
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request at INFO ("HTTP Request: POST ... 200 OK"): a line per upstream
    # call that says only that the model server answered, on every turn. Its failures reach
    # the turn's own lines (turn_failed, upstream_error); its warnings still come through,
    # and at DEBUG everything does.
    logging.getLogger("httpx").setLevel(
        logging.DEBUG if root.level <= logging.DEBUG else logging.WARNING)
    # alembic announces each of its plugins at INFO when it is first imported, which may
    # be after this (the store is imported once the settings passed): seven lines of noise.
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    for name in UVICORN_LOGGERS:
        # uvicorn's CLI (the Docker entry point) gives its loggers plain-text handlers that do
        # not propagate: hand them to the JSON root handler, tracebacks included.
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers.clear()
        uvicorn_logger.propagate = True


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """A logger bound to a component name."""
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(component=name)
    return logger
