"""The process's heap after startup, out of the garbage collector's way.

A full collection walks every object the collector tracks. After startup that is about
190,000 objects of imported modules, classes and compiled statements (the openai and
SQLAlchemy packages are most of them), none of which ever becomes garbage; under load a full
collection then paused the event loop, and every stream on it, for 60 to 100 ms. Frozen
(`gc.freeze`), they are skipped by every later collection, which walks only what the
process made since: the streams' own objects.

And what the process frees goes back to the system (return_free_memory), not only what is
freed at the end of the heap."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Callable

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


#: How often the process hands the memory it freed back to the system (return_free_memory).
TRIM_INTERVAL_S = 10.0


def _find_malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim  # type: ignore[no-any-return]


_malloc_trim = _find_malloc_trim()


def can_return_free_memory() -> bool:
    """This C library has malloc_trim (glibc): return_free_memory does something."""
    return _malloc_trim is not None


def return_free_memory() -> bool:
    """Hand the pages glibc's malloc holds free back to the system; False where it cannot.

    A chunk freed between chunks still in use stays in the process: glibc gives back only
    the free end of its heap. A turn's short-lived allocations (a statement's rows, the HTTP
    layers' buffers, SQLite's own) are freed between the open streams' long-lived objects,
    so after a burst of turns the resident memory stayed at its peak, and with 2,000 streams
    open about 5 KB a stream was memory freed but never returned. malloc_trim(0) releases
    every whole free page, inside the heap too; it took 1.5 ms with 250 MB resident."""
    if _malloc_trim is None:
        return False
    _malloc_trim(0)
    return True
