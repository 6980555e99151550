"""Several uvicorn workers, each accepting on a listening socket of its own.

uvicorn's supervisor binds one socket and hands it to every worker. A worker's event loop,
once woken, accepts every connection waiting there (asyncio accepts up to the backlog in one
go), so a client that opens its pool of keep-alive connections at once finds them all in one
worker: the workers bench saw one worker serve all of one client's 20 connections and the
other none, a second worker adding nothing. Here the supervisor binds one socket per worker
on the same address with `SO_REUSEPORT`, and the kernel spreads new connections over them by
a hash of each connection's addresses.

A worker that dies, or that `SIGHUP` replaces, is replaced on its own socket, which the
supervisor keeps open: the connections the kernel queued there wait for the replacement
instead of being refused. Everything else (signals, health checks, a worker that fails at
start stopping the supervisor) is uvicorn's `Multiprocess`, whose two replacement paths are
restated below only to hand the replacement its own socket (uvicorn 0.54).
"""

from __future__ import annotations

import argparse
import socket
import sys

from uvicorn import Config, Server
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import Multiprocess, Process, logger


def reuse_port_listeners(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` sockets bound to `host`:`port` with SO_REUSEPORT (and SO_REUSEADDR, as uvicorn
    binds): the kernel balances the connections among the ones that listen."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listeners: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            listeners.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            sock.set_inheritable(True)
            port = sock.getsockname()[1]  # port 0: the others join the first one's port
    except OSError:
        for sock in listeners:
            sock.close()
        raise
    return listeners


class SpreadWorkers(Multiprocess):
    """uvicorn's supervisor, with worker `i` (and each of its replacements) serving
    `listeners[i]` alone."""

    def __init__(self, config: Config, listeners: list[socket.socket]) -> None:
        super().__init__(config, sockets=[])
        self.listeners = listeners
        self.processes_num = len(listeners)

    def worker(self, index: int) -> Process:
        process = Process(self.config, [self.listeners[index]])
        process.start()
        return process

    def init_processes(self) -> None:
        self.processes = [self.worker(index) for index in range(self.processes_num)]

    def restart_all(self) -> None:
        """Each worker's replacement brought into service before the old one retires."""
        for index, old in enumerate(self.processes):
            if self.should_exit.is_set():
                return
            new = self.worker(index)
            if not new.wait_until_ready(self.config.timeout_worker_healthcheck,
                                        self.should_exit):
                new.kill()
                new.join()
                if not self.should_exit.is_set():
                    logger.error(f"New child process [{new.pid}] was not ready in time; "
                                 f"keeping worker [{old.pid}] and aborting the restart.")
                return
            old.terminate()
            old.join()
            self.processes[index] = new

    def keep_subprocess_alive(self) -> None:
        """A dead or hung worker replaced; one that failed at start stops the supervisor (it
        would fail the same way again)."""
        for index, process in enumerate(self.processes):
            if self.should_exit.is_set():
                return
            if process.is_alive(timeout=self.config.timeout_worker_healthcheck):
                continue
            process.kill()
            process.join()
            if process.exitcode == STARTUP_FAILURE:
                logger.error(f"Child process [{process.pid}] failed to start, "
                             "stopping the parent process.")
                self.should_exit.set()
                return
            if self.should_exit.is_set():
                return
            logger.info(f"Child process [{process.pid}] died")
            self.processes[index] = self.worker(index)


def serve_workers(config: Config) -> None:
    """Run `config.workers` workers of `config`'s application (an import string) on
    `config.host`:`config.port`, spread by the kernel."""
    listeners = reuse_port_listeners(config.host, config.port, config.workers)
    logger.info("Uvicorn running on http://%s:%d with %d workers, a socket each",
                config.host, listeners[0].getsockname()[1], len(listeners))
    try:
        SpreadWorkers(config, listeners).run()
    except KeyboardInterrupt:
        pass
    finally:
        for sock in listeners:
            sock.close()


def main(argv: list[str] | None = None) -> None:
    """`python -m app.gateway.workers`: what the container and the benchmark run, with the
    names of uvicorn's options they use; one worker is uvicorn's own server."""
    parser = argparse.ArgumentParser(prog="python -m app.gateway.workers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("app", nargs="?", default="app.gateway.main:create_app",
                        help="the application factory's import string")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--timeout-graceful-shutdown", type=int, default=None)
    parser.add_argument("--timeout-keep-alive", type=int, default=5)
    parser.add_argument("--log-level", default=None)
    parser.add_argument("--no-access-log", dest="access_log", action="store_false")
    args = parser.parse_args(argv)
    config = Config(args.app, factory=True, host=args.host, port=args.port,
                    workers=args.workers, access_log=args.access_log, log_level=args.log_level,
                    timeout_keep_alive=args.timeout_keep_alive,
                    timeout_graceful_shutdown=args.timeout_graceful_shutdown)
    if config.workers > 1:
        serve_workers(config)
        return
    server = Server(config)
    server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)


if __name__ == "__main__":
    main()
