"""The process's heap after startup, out of the garbage collector's way.

A full collection walks every object the collector tracks. After startup that is about
190,000 objects of imported modules, classes and compiled statements (the openai and
SQLAlchemy packages are most of them), none of which ever becomes garbage; under load a full
collection then paused the event loop, and every stream on it, for 60 to 100 ms. Frozen
(`gc.freeze`), they are skipped by every later collection, which walks only what the
process made since: the streams' own objects."""

from __future__ import annotations

import gc

_frozen = False


def freeze_startup_heap() -> None:
    """Collect what startup left as garbage, then freeze what is alive. Once per process:
    what is alive at a later call (another application built in the same process, as tests
    do) may still become garbage, and a frozen object is never freed."""
    global _frozen
    if _frozen:
        return
    _frozen = True
    gc.collect()
    gc.freeze()


#: Python's defaults are (700, 10, 10): a young collection every 700 net allocations of
#: container objects. A streaming turn allocates thousands of short-lived ones (events,
#: frames, the HTTP layers' objects) that die by their reference counts within the turn, so
#: young collections ran about once a turn, and every tenth promoted what was alive then
#: into the older generations, whose collections walk every live stream: at 500 concurrent
#: turns (1,500 turns, one process) the collector ran 1,555 times for 1.7 s in all, 12 of
#: them full collections of up to 143 ms, each a pause of every stream. At (50,000, 20, 10):
#: 17 times, 0.3 s, one full collection (93 ms). Cyclic garbage is still collected, within
#: 50,000 allocations.
COLLECTION_THRESHOLDS = (50_000, 20, 10)


def space_out_collections() -> None:
    """Collect young objects every COLLECTION_THRESHOLDS[0] allocations, not every 700."""
    gc.set_threshold(*COLLECTION_THRESHOLDS)
