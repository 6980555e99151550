"""Finding and fixing messages stored by older, buggy gateways (pure rules and planning).

The runs (per-batch apply with backups, rollback) are app.repair.service, their SQL
(keyset-paginated scans, backups, restoring) app.repair.repository; the CLI is
scripts/repair_messages.py; the operator guide docs/repair.md.
"""

from app.repair.plan import RepairPlan, plan_repair
from app.repair.report import Finding, RepairReport, RollbackReport, Sample
from app.repair.rows import Resplit, ScanFilter, StoredMessage
from app.repair.rules import (
    CONTEXT_ECHO,
    FIX_RULES,
    LEGACY_SYNTHETIC,
    MARKER_HEADER,
    NOTICE_RULES,
    REASONING_SPLIT,
    TOOL_CALL_SPLIT,
    UNCLOSED_COMMENT,
    UNCLOSED_METADATA,
    Diagnosis,
    diagnose,
)

__all__ = [
    "CONTEXT_ECHO",
    "FIX_RULES",
    "LEGACY_SYNTHETIC",
    "MARKER_HEADER",
    "NOTICE_RULES",
    "REASONING_SPLIT",
    "TOOL_CALL_SPLIT",
    "UNCLOSED_COMMENT",
    "UNCLOSED_METADATA",
    "Diagnosis",
    "Finding",
    "RepairPlan",
    "RepairReport",
    "Resplit",
    "RollbackReport",
    "Sample",
    "ScanFilter",
    "StoredMessage",
    "diagnose",
    "plan_repair",
]
