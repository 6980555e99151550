"""A database full of what old gateways left behind, mixed with clean rows that must not change.

Rows are bulk-inserted (a few statements in one transaction): corrupted rows cannot be made
through the store's API, which filters and sanitises everything it writes.

    python -m tests.repair.seed DATABASE_URL [--messages 10000]   # seed a migrated database
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import sys
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import insert, text

from app.store.db import Database
from app.store.models import Message, Thread

# kind -> (role, content, metadata, synthetic, trigger_type, expected rules, expected notices)
Kind = tuple[str, str, dict[str, Any], bool, str | None, tuple[str, ...], tuple[str, ...]]

CLEAN_KINDS: dict[str, Kind] = {
    "clean_answer": ("assistant", "Sure. Here is the answer.\n\nWith two paragraphs.",
                     {"tokens": 42, "model": "gpt-4o"}, False, None, (), ()),
    "clean_trailing_ws": ("assistant", "  Answer with spaces around it.  \n",
                          {"tokens": 7}, False, None, (), ()),
    "clean_html_comment": ("assistant", "Plain <!-- comment --> stays", {}, False, None, (), ()),
    "clean_inline_code": ("assistant", "Start a comment with `<!--` in HTML.", {},
                          False, None, (), ()),
    "clean_fenced_code": ("assistant", "Example:\n```html\n<!-- open\n```\nDone.",
                          {"tokens": 3}, False, None, (), ()),
    "clean_near_miss": ("assistant", "<!-- META-DATA: {} --> is not a header", {}, False, None,
                        (), ()),
    "clean_question": ("user", "Co je nového? 👋", {}, False, None, (), ()),
    "clean_user_mentions_prefix": ("user", "Why did I see [AUTONOMOUS_FOLLOWUP: x] once?", {},
                                   False, None, (), ()),
    "clean_flagged_synthetic": (
        "user", "[AUTONOMOUS_FOLLOWUP: check_in] still there?",
        {"synthetic": True, "trigger_type": "check_in", "trigger_reason": "idle"},
        True, "check_in", (), ()),
    "clean_user_types_marker": ("user", "What does <!-- METADATA: {} --> mean?", {},
                                False, None, (), ()),
}

CORRUPT_KINDS: dict[str, Kind] = {
    "metadata_block": ("assistant", 'Answer.\n\n<!-- METADATA: {"language": "en"} -->',
                       {"tokens": 12}, False, None, ("marker_header",), ()),
    "metadata_unclosed": ("assistant", '<!-- METADATA: {"language": "cs"}Aha, chápu...',
                          {"tokens": 9, "model": "gpt-4o"}, False, None,
                          ("unclosed_metadata",), ()),
    "metadata_unterminated": ("assistant", "<!-- METADATA: Aha, chápu", {}, False, None,
                              ("unclosed_metadata",), ()),
    "context_echo": ("assistant", '<!-- MSG_CONTEXT: {"history": []} -->\nHello again.',
                     {"tokens": 5}, False, None, ("context_echo",), ()),
    "echo_and_unclosed": (
        "assistant",
        '<!-- MSG_CONTEXT: {"history": []} -->\n<!-- METADATA: {"language": "cs"}Aha',
        {}, False, None, ("context_echo", "unclosed_metadata"), ()),
    "metadata_kept": ("assistant", 'Hi <!-- METADATA: {"language": "de"} -->',
                      {"response_metadata": {"language": "en"}}, False, None,
                      ("marker_header",), ()),
    "legacy_synthetic": ("user", "[AUTONOMOUS_FOLLOWUP: check_in] The user went quiet.", {},
                         False, None, ("legacy_synthetic",), ()),
    "legacy_synthetic_bare": ("user", "[AUTONOMOUS_FOLLOWUP:]", {"x": 1}, False, None,
                              ("legacy_synthetic",), ()),
}

NOTICE_KINDS: dict[str, Kind] = {
    "stray_comment": ("assistant", "In HTML, <!-- starts a comment that never ends", {},
                      False, None, (), ("unclosed_comment",)),
}

ALL_KINDS = {**CLEAN_KINDS, **CORRUPT_KINDS, **NOTICE_KINDS}
RAW_METADATA_KINDS = ("metadata_unclosed", "clean_answer")
"""Kinds whose metadata is rewritten as compact JSON text (as a non-Python writer would have
stored it), so a rollback must restore those exact bytes."""
RAW_METADATA = '{"tokens":9,"model":"gpt-4o","ratio":1.50}'


@dataclass
class Seeded:
    """What was inserted: each message id's kind, and the expected totals."""

    kinds: dict[uuid.UUID, str] = field(default_factory=dict)

    def ids_of(self, *names: str) -> set[uuid.UUID]:
        return {i for i, k in self.kinds.items() if k in names}

    @property
    def corrupt_ids(self) -> set[uuid.UUID]:
        return self.ids_of(*CORRUPT_KINDS)

    @property
    def clean_ids(self) -> set[uuid.UUID]:
        return set(self.kinds) - self.corrupt_ids

    def expected_by_rule(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for kind in self.kinds.values():
            counts.update(ALL_KINDS[kind][5])
        return counts


def _kind_for(index: int, rng: random.Random) -> str:
    """About one row in six is corrupt; every kind appears."""
    names = list(ALL_KINDS)
    if index < len(names):
        return names[index]
    if rng.random() < 0.17:
        return rng.choice(list(CORRUPT_KINDS))
    if rng.random() < 0.02:
        return "stray_comment"
    return rng.choice(list(CLEAN_KINDS))


async def seed(db: Database, messages: int = 10_000, *, threads: int = 100,
               users: int = 10, rng_seed: int = 6) -> Seeded:
    """Insert `messages` rows over `threads` threads in one transaction."""
    rng = random.Random(rng_seed)
    start = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    thread_rows = [
        {"id": uuid.uuid4(), "user_id": f"user-{t % users}", "title": f"thread {t}",
         "autonomy": {}, "created_at": start, "updated_at": start}
        for t in range(threads)
    ]
    seeded = Seeded()
    rows: list[dict[str, Any]] = []
    for i in range(messages):
        kind = _kind_for(i, rng)
        role, content, meta, synthetic, trigger, _, _ = ALL_KINDS[kind]
        thread = thread_rows[i % threads]
        at = start + dt.timedelta(seconds=i)
        message_id = uuid.uuid4()
        seeded.kinds[message_id] = kind
        rows.append({
            "id": message_id, "thread_id": thread["id"], "user_id": thread["user_id"],
            "role": role, "content": content, "meta": dict(meta), "status": "complete",
            "synthetic": synthetic, "trigger_type": trigger, "created_at": at,
            "updated_at": at, "completed_at": at,
        })
    async with db.transaction() as s:
        await s.execute(insert(Thread), thread_rows)
        for offset in range(0, len(rows), 2_000):
            await s.execute(insert(Message), rows[offset:offset + 2_000])
        raw_ids = [i for i in seeded.ids_of(*RAW_METADATA_KINDS)][:50]
        for message_id in raw_ids:
            await s.execute(
                text("UPDATE messages SET metadata = :raw WHERE id = :id"),
                {"raw": RAW_METADATA, "id": _id_param(db, message_id)},
            )
    return seeded


def _id_param(db: Database, message_id: uuid.UUID) -> Any:
    """How a raw statement spells a Uuid column's value (hex text on SQLite)."""
    return message_id.hex if db.backend == "sqlite" else message_id


async def snapshot(db: Database) -> dict[str, tuple[Any, ...]]:
    """Every message's stored bytes (metadata as the database's own text) and flags."""
    async with db.transaction() as s:
        result = await s.execute(text(
            "SELECT CAST(id AS TEXT), content, CAST(metadata AS TEXT), synthetic, trigger_type, "
            "CAST(updated_at AS TEXT), reasoning, reasoning_ms FROM messages"
        ))
        return {row[0].replace("-", ""): tuple(row[1:]) for row in result}


def _main() -> None:
    url = sys.argv[1]
    count = int(sys.argv[sys.argv.index("--messages") + 1]) if "--messages" in sys.argv else 10_000

    async def run() -> None:
        db = Database(url)
        try:
            seeded = await seed(db, count)
            print(f"seeded {len(seeded.kinds)} messages, {len(seeded.corrupt_ids)} corrupt")
        finally:
            await db.dispose()

    asyncio.run(run())


if __name__ == "__main__":
    _main()
