"""Imported last by the gateway fork server (tests/support/gateway/processes.py), once it has
imported the gateway: what the server holds is collected and frozen there, once. A module of
tests.support, not of its gateway package, whose import would bring pytest into the server.

A gateway freezes its heap as it starts (app.process.heap.freeze_startup_heap), after a full
collection. In a fork of a server that had not frozen its own, that collection walked every
object the server had imported (0.2 s of CPU a process, seconds on a loaded machine) and
wrote to each, copying the memory pages the fork shared with the server. Frozen here, those
objects are left out of every collection of every fork, as they are in a gateway started
alone, which froze them itself: the gateway's own collection then only walks what it built."""

import gc

gc.collect()
gc.freeze()
