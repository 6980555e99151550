"""The gateway test harness: the one place tests get a running gateway (and its upstream,
the demo model server) from. Import everything from here, `from tests.support.gateway import
...`; the fixtures are registered by the root conftest.py (`tests.support.gateway.fixtures`).

Three kinds of gateway, for three needs (gateways.py)
    same_loop_gateway(database_url, upstream, **settings) -> SameLoopGateway
        the app in the test's own event loop, in memory: the test reaches its runtime and
        services directly and holds turns open (`hold_turn`); its logs reach capsys.
        `serve_gateway(settings)` is the same app under uvicorn on a loopback port.
    start_gateway / gateway fixtures, GatewayPool.start -> InProcessGateway
        uvicorn on the session's server loop (servers.py), on a loopback port: the usual
        kind; client() in memory, client(over_http=True) over the socket, logs() its own.
    start_gateway_process(es) fixtures, GatewayPool.start_process(es) -> GatewayProcess
        a real process, forked from a server that has the gateway imported (processes.py),
        for what only a process shows: a crash (kill9), two processes on one database, a
        page reconnecting to another process.

Settings (settings.py): tests write CHATGATE_* variables; TEST_GATEWAY_ENV has the short
timeouts every test gateway starts from, and no gateway reads the developer's environment.

Client side (sse.py): parse_sse, iter_sse, post_turn -> TurnResult.
"""

from tests.support.gateway.fixtures import (
    StartGateway,
    StartGatewayProcess,
    StartGatewayProcesses,
)
from tests.support.gateway.gateways import (
    FakeClock,
    Gateway,
    GatewayPool,
    GatewayProcess,
    InProcessGateway,
    LiveGateway,
    SameLoopGateway,
    json_lines,
    same_loop_gateway,
    start_in_process_gateway,
)
from tests.support.gateway.processes import (
    ROOT,
    ProcessHandle,
    clean_env,
    spawn_uvicorn,
    stop_process,
    wait_for_http,
)
from tests.support.gateway.servers import (
    InProcessServer,
    LogSink,
    ServerFailed,
    build_gateway_app,
    free_port,
    serve_gateway,
    server_loop,
)
from tests.support.gateway.settings import (
    TEST_GATEWAY_ENV,
    gateway_env,
    gateway_settings,
    settings_from_env,
)
from tests.support.gateway.sse import SseEvent, TurnResult, iter_sse, parse_sse, post_turn
from tests.support.gateway.upstream import DemoLlm, start_demo_llm

__all__ = [
    "ROOT",
    "TEST_GATEWAY_ENV",
    "DemoLlm",
    "FakeClock",
    "Gateway",
    "GatewayPool",
    "GatewayProcess",
    "InProcessGateway",
    "InProcessServer",
    "LiveGateway",
    "LogSink",
    "ProcessHandle",
    "SameLoopGateway",
    "ServerFailed",
    "SseEvent",
    "StartGateway",
    "StartGatewayProcess",
    "StartGatewayProcesses",
    "TurnResult",
    "build_gateway_app",
    "clean_env",
    "free_port",
    "gateway_env",
    "gateway_settings",
    "iter_sse",
    "json_lines",
    "parse_sse",
    "post_turn",
    "same_loop_gateway",
    "serve_gateway",
    "server_loop",
    "settings_from_env",
    "spawn_uvicorn",
    "start_demo_llm",
    "start_in_process_gateway",
    "stop_process",
    "wait_for_http",
]
