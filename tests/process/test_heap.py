"""app/process/heap.py in a fresh interpreter (a freeze is for the life of the process): the startup
garbage is collected, not frozen, and a second freeze in the same process freezes nothing;
with collections spaced out, cyclic garbage is still collected without asking."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = """
import gc, weakref
from app.process.heap import freeze_startup_heap

class Node:
    pass

garbage = Node(); garbage.me = garbage; ref = weakref.ref(garbage); del garbage
freeze_startup_heap()
assert ref() is None, "startup garbage was frozen instead of collected"
frozen = gc.get_freeze_count()
assert frozen > 1000, frozen
later = Node(); later.me = later; later_ref = weakref.ref(later); del later
freeze_startup_heap()
assert gc.get_freeze_count() == frozen, "a second call froze again"
gc.collect()
assert later_ref() is None, "what a later call saw alive was frozen"
"""


def test_the_startup_heap_is_frozen_once_its_garbage_collected_first() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


SPACED = """
import gc, weakref
from app.process.heap import COLLECTION_THRESHOLDS, space_out_collections

class Node:
    pass

space_out_collections()
first = Node(); first.me = first; ref = weakref.ref(first); del first
for _ in range(3 * COLLECTION_THRESHOLDS[0]):  # cycles nobody collects by hand
    node = Node(); node.me = node
assert ref() is None, "cyclic garbage was never collected"
"""


def test_spaced_out_collections_still_collect_cyclic_garbage() -> None:
    done = subprocess.run([sys.executable, "-c", SPACED], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


TRIMMED = """
from pathlib import Path
from app.process.heap import return_free_memory

def rss_kb() -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0])

# 120 MB in blocks malloc serves from its heap, one block in 64 kept: what is freed lies
# between blocks in use, where free() alone gives nothing back.
kept, freed = [], []
for i in range(200_000):
    (kept if i % 64 == 0 else freed).append(bytes(600))
del freed
before = rss_kb()
assert return_free_memory()
after = rss_kb()
assert before - after > 50_000, (before, after)
"""


def test_memory_freed_between_blocks_in_use_goes_back_to_the_system() -> None:
    if not Path("/proc/self/status").exists():
        pytest.skip("no /proc to read the resident memory from")
    done = subprocess.run([sys.executable, "-c", TRIMMED], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
