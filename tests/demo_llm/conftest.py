"""A real demo model server under uvicorn on a free loopback port, and a real OpenAI client."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator

import httpx
import openai
import pytest
import uvicorn
from starlette.applications import Starlette

from app.demo_llm import DemoSettings, create_demo_app
from tests.support.gateway.servers import bound_socket

SLOW_FIRST_S = 0.3


def serve_in_thread(app: Starlette) -> tuple[str, uvicorn.Server, threading.Thread]:
    """Start uvicorn for `app` on 127.0.0.1 with an OS-chosen port; return its base URL."""
    sock = bound_socket()
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("demo server did not start")
        time.sleep(0.01)
    return f"http://127.0.0.1:{port}", server, thread


@pytest.fixture(scope="session")
def stopping_demo_threads() -> Iterator[list[threading.Thread]]:
    """Threads of demo servers told to stop; joined once, at the end of the session."""
    threads: list[threading.Thread] = []
    yield threads
    for thread in threads:
        thread.join(timeout=10)


@pytest.fixture
def start_demo(stopping_demo_threads: list[threading.Thread]
               ) -> Iterator[Callable[[DemoSettings], str]]:
    """Start fresh demo servers with given settings; all are told to stop after the test.
    Nobody waits for them to finish stopping (uvicorn notices within 0.1 s, which was most
    of each test's time): the next test has servers of its own on other ports."""
    running: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(settings: DemoSettings) -> str:
        url, server, thread = serve_in_thread(create_demo_app(settings))
        running.append((server, thread))
        return url

    yield start
    for server, thread in running:
        server.should_exit = True
        stopping_demo_threads.append(thread)


@pytest.fixture
def demo_url(start_demo: Callable[[DemoSettings], str]) -> str:
    """Base URL (without /v1) of a fresh demo server: no pacing (of the thinking neither),
    a short slow-first pause."""
    return start_demo(DemoSettings(delay_ms=0, think_ms=0, slow_first_s=SLOW_FIRST_S))


@pytest.fixture
async def http(demo_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A plain HTTP client for the debug endpoints and raw-byte checks."""
    async with httpx.AsyncClient(base_url=demo_url, timeout=10) as client:
        yield client


@pytest.fixture
async def llm(demo_url: str) -> AsyncIterator[openai.AsyncOpenAI]:
    """The real OpenAI SDK client, no retries (so each call is one request)."""
    async with httpx.AsyncClient(timeout=10) as transport:
        client = openai.AsyncOpenAI(base_url=f"{demo_url}/v1", api_key="demo",
                                    http_client=transport, max_retries=0)
        yield client
