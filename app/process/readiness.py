"""Whether this process may take traffic: the database answers and is migrated to head.

A load balancer rotates on the answer, so it must never raise: an unreachable database is a
reason to report, not an error, and the reason names which of the two is wrong.
"""

from __future__ import annotations

from typing import Literal

from app.observe.logging import get_logger
from app.store.db import Database
from app.store.migrations import is_at_head

log = get_logger("services.readiness")

NotReady = Literal["database_unreachable", "database_not_migrated"]


async def not_ready_reason(db: Database) -> NotReady | None:
    """None when ready; otherwise why not."""
    try:
        migrated = await is_at_head(db)
    except Exception as exc:
        log.warning("readyz_database_unreachable", error=type(exc).__name__)
        return "database_unreachable"
    return None if migrated else "database_not_migrated"
