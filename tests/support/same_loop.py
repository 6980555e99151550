"""One gateway under a real uvicorn server on a loopback port, in the test's own event loop:
its background tasks and the test share the loop (the test can reach its services), while
clients still talk over a real socket. tests/support/inprocess.py hosts the module-wide
gateways on a loop of their own instead."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import uvicorn

from app.main import create_app
from app.settings import Settings


@contextlib.asynccontextmanager
async def serve_gateway(settings: Settings) -> AsyncIterator[str]:
    """Start the gateway (lifespan included) and yield its base URL; stopped after."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(settings), log_level="warning",
                                           lifespan="on", timeout_graceful_shutdown=5))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(20):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 15)
        sock.close()
