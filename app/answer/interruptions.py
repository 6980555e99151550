"""Why an answer was stored `interrupted`: its `metadata.interrupted_reason`, one word a reader
(the page, an operator, a Responses client's `incomplete_details`) can act on.

An answer is `interrupted` when something ended it before the model did. Whatever ends a
running answer names its reason where it ends it (a turn's run is stopped, an event stream
is cut, a call's key is revoked: `Turn.stopping`, `CompletionCall.stopping`), and the
reason is written once, where the finished message is built (app.answer.finish). The same
words name why a run was stopped in the log (`turn_stopped`) and the metrics
(`chatgate_turns_stopped_total`). Rows that no running process finished are settled by a
sweep, which writes its own reason."""

from __future__ import annotations

# -- a running answer, stopped by this process --------------------------------------------

#: Its user asked (`POST .../stop`, on this process or another): the page says "stopped".
STOP_REQUEST = "stop_request"
#: The API key it runs under was revoked.
KEY_REVOKED = "key_revoked"
#: This gateway process is shutting down; the client is told to ask again.
SHUTTING_DOWN = "shutting_down"
#: This process could not renew its heartbeat in the database within its fence bound, so it
#: ended its answers itself before any other process may take them over (app.process).
DATABASE_UNREACHABLE = "database_unreachable"
#: Its client went away (hung up, or stopped reading past the send timeout) and none came
#: back within the resume grace.
CLIENT_GONE = "client_gone"
#: It was cancelled and nothing said why: not expected (a bug, or a server that cancels
#: requests itself); the log around the row's `turn_finished` line tells more.
CANCELLED = "cancelled"

# -- a row left `streaming`, settled by a sweep -------------------------------------------

#: The process that ran it died (its heartbeat stopped); a live process swept it.
PROCESS_DIED = "process_died"
#: Left `streaming` longer than `stale_streaming_after_s` by a process that had no id.
STALE_STREAMING = "stale_streaming"
#: A follow-up's worker died mid-turn (its lease expired).
FOLLOWUP_WORKER_DIED = "followup_worker_died"
