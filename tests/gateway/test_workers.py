"""Several workers, a listening socket each (app.gateway.workers): connections opened at once
are spread over the workers by the kernel, and a worker that dies is replaced on its own
socket, so the connections queued there are served, not lost.

uvicorn's own supervisor (one socket shared by every worker) gave one worker all of 32
connections opened at once in one of five tries of a client's, and 3 to 13 of them in the
others; once both of its workers are warm it spread them as well as the kernel's hash does,
so the spread test also checks what gives it: each worker holds a listening socket of its
own. Each of two workers serving at least a fifth of 64 fails about once in a million runs
of the hash."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.gateway.workers import reuse_port_listeners
from tests.support.gateway import free_port, spawn_uvicorn, stop_process, wait_for_http
from tests.support.waits import until_sync

#: The test's bound on one connection's answer (a replacement worker's start included).
ANSWER_WITHIN_S = 30.0


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """`python -m app.gateway.workers --workers 2` serving an application that answers with
    its process's pid."""
    port = free_port()
    log_path = tmp_path / "workers.log"
    process = spawn_uvicorn(port, {}, log_path, "--workers", "2",
                            app="tests.support.pid_app:create_app")
    try:
        wait_for_http(f"http://127.0.0.1:{port}/", process, log_path)
        # A worker's socket takes connections once the worker listens, after its start.
        until_sync(lambda: len(served_by(port, 16)) == 2, what="both workers listening")
        yield port, process
    finally:
        stop_process(process)


def served_by(port: int, connections: int) -> Counter[int]:
    """Open `connections` connections at once (all accepted by the kernel before any request
    is sent), then ask each which process serves it."""
    opened = [socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WITHIN_S)
              for _ in range(connections)]
    pids: Counter[int] = Counter()
    for sock in opened:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: workers\r\nConnection: close\r\n\r\n")
    for sock in opened:
        with sock:
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
        pids[int(answer.partition(b"\r\n\r\n")[2])] += 1
    return pids


def listening_sockets(port: int) -> set[str]:
    """The inodes of the IPv4 sockets listening on `port` (state 0A in /proc/net/tcp)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
            inodes.add(fields[9])
    return inodes


def sockets_of(pid: int) -> set[str]:
    """The inodes of the sockets process `pid` holds open."""
    links = (os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir())
    return {link[len("socket:["):-1] for link in links if link.startswith("socket:[")}


def test_each_worker_accepts_on_a_socket_of_its_own_and_connections_spread(
    two_workers: tuple[int, subprocess.Popen[bytes]],
) -> None:
    port, _ = two_workers
    pids = served_by(port, 64)
    assert len(pids) == 2, pids
    assert min(pids.values()) >= 64 // 5, pids
    listening = listening_sockets(port)
    held = [sockets_of(pid) & listening for pid in pids]
    assert [len(sockets) for sockets in held] == [1, 1], held
    assert held[0] != held[1], "the workers share one listening socket"


def test_a_killed_worker_is_replaced_on_its_own_socket(
    two_workers: tuple[int, subprocess.Popen[bytes]],
) -> None:
    """Connections the kernel gives the dead worker's socket wait for its replacement: every
    one is answered, by the survivor or by the new worker."""
    port, _ = two_workers
    before = served_by(port, 64)
    killed, survivor = sorted(before)
    os.kill(killed, signal.SIGKILL)
    after = served_by(port, 64)
    assert sum(after.values()) == 64
    assert killed not in after
    assert survivor in after and len(after) == 2, (before, after)


def test_the_listeners_share_one_port_and_a_taken_port_leaves_none_open() -> None:
    listeners = reuse_port_listeners("127.0.0.1", 0, 3)
    try:
        assert len({sock.getsockname()[1] for sock in listeners}) == 1
    finally:
        for sock in listeners:
            sock.close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        descriptors = os.listdir("/proc/self/fd")
        with pytest.raises(OSError):
            reuse_port_listeners("127.0.0.1", taken.getsockname()[1], 2)
        assert os.listdir("/proc/self/fd") == descriptors
