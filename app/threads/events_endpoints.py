"""GET /api/threads/{id}/events: a `text/event-stream` of the thread's new visible messages
(autonomous follow-ups included) for as long as the client stays. Events: `ready`
{thread_id} once subscribed, then `message` {"message": {id, role, content, status,
metadata, created_at}} per message; `error` {code: shutting_down} last when the process
shuts down (the page connects again). A foreign or unknown thread is 404."""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing

from sse_starlette import ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response

from app.api import bodies
from app.api.auth import authenticate
from app.api.errors import ApiError, not_found
from app.api.sse import StreamResponse, sse_event
from app.api.state import runtime
from app.events.bus import MessageBus
from app.threads.watch import thread_events, thread_is_users

#: How long the stream may take, once the server exits, to send its last event.
LAST_EVENT_GRACE_S = 2.0


def message_bus(request: Request) -> MessageBus:
    """The process's bus (set up by the lifespan); 503 while it is not there."""
    autonomy = getattr(request.app.state, "autonomy", None)
    if autonomy is None:
        raise ApiError(503, "unavailable", "thread events are not available")
    bus: MessageBus = autonomy.bus
    return bus


async def _encoded(events: AsyncGenerator[tuple[str, dict[str, object]], None]
                   ) -> AsyncIterator[ServerSentEvent]:
    # aclosing: closing this generator also closes `events` at once, which unsubscribes
    # from the bus (otherwise a dead subscriber's queue lingers until garbage collection).
    async with aclosing(events) as pairs:
        async for name, data in pairs:
            yield sse_event(name, data)


async def thread_events_stream(request: Request) -> Response:
    principal = await authenticate(request)
    thread_id = bodies.thread_id(request)
    rt = runtime(request)
    if not await thread_is_users(rt.db, principal.user_id, thread_id):
        raise not_found()
    events = thread_events(message_bus(request), rt.db, principal.user_id, thread_id,
                           rt.shutdown.watch)
    # The shutdown grace: sse_starlette, hearing of the server's exit itself, would cancel
    # the stream before the generator's last event (it ends on the shutdown at once).
    return StreamResponse(_encoded(events), ping=rt.settings.keepalive_s, sep="\n",
                          shutdown_grace_period=LAST_EVENT_GRACE_S,
                          send_timeout=rt.settings.sse_send_timeout_s,
                          log_ids={"user_id": principal.user_id, "thread_id": str(thread_id)},
                          revocation=functools.partial(rt.revocations.stream, principal.key_id))
