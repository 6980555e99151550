"""The native API in the OpenAPI document: threads, messages and their streams, models,
usage and its admin reports, and the process's own routes (health, readiness, metrics, this
document). The limits are the code's own constants, so the document cannot drift from
them; docs/api.md says the rest in prose."""

from __future__ import annotations

from app.api.bodies import MAX_TITLE_CHARS
from app.followups.autonomy import MAX_FOLLOWUPS_LIMIT, MAX_IDLE_SECONDS, MIN_IDLE_SECONDS
from app.openapi.schemas import (
    ANY_OBJECT,
    BOOLEAN,
    COUNT,
    CSV,
    DAY,
    JSON,
    NUMBER,
    TEXT,
    TIMESTAMP,
    UUID,
    Schema,
    array,
    event_stream,
    header_parameter,
    json_response,
    nullable,
    obj,
    operation,
    path_parameter,
    query_parameter,
    ref,
)
from app.threads.endpoints import MAX_QUERY_CHARS
from app.usage.admin_reports import MAX_LIMIT, MAX_USERS

#: The roles and statuses of a stored message (app.store.models; a test holds them equal).
ROLES = ["user", "assistant", "system"]
STATUSES = ["complete", "streaming", "interrupted", "failed"]
ORIGINS = ["chat", "responses"]

THREAD_ID = path_parameter("thread_id", UUID, "The thread's id; a malformed one is a 404.")
MESSAGE_ID = path_parameter("message_id", UUID, "The message's id; a malformed one is a 404.")
START = query_parameter("start", DAY, "The first day (UTC), `YYYY-MM-DD`.")
END = query_parameter("end", DAY, "The last day (UTC), `YYYY-MM-DD`.")
GROUP_BY = query_parameter("group_by", {"type": "string", "enum": ["day", "model"]},
                           "One row per day or per model.")
FORMAT = query_parameter("format", {"type": "string", "enum": ["json", "csv"]},
                         "JSON (the default) or every row as CSV.")


def _figures() -> Schema:
    return obj({"total_tokens": COUNT, "prompt_tokens": COUNT, "completion_tokens": COUNT,
                "message_count": nullable(COUNT), "llm_call_count": COUNT,
                "cost_usd": nullable(NUMBER), "unpriced_call_count": COUNT,
                "reasoning_tokens": nullable(COUNT)})


def schemas(max_content_chars: int) -> dict[str, Schema]:
    title = {"type": "string", "maxLength": MAX_TITLE_CHARS}
    return {
        "NewThread": obj(optional={"title": nullable(title)}),
        "ThreadCreated": obj({"id": UUID, "title": nullable(TEXT), "created_at": TIMESTAMP}),
        "ThreadSummary": obj({"id": UUID, "title": nullable(TEXT), "message_count": COUNT,
                              "preview": nullable(TEXT), "updated_at": TIMESTAMP,
                              "model": nullable(TEXT),
                              "origin": {"type": "string", "enum": ORIGINS}}),
        "ThreadList": obj({"threads": array(ref("ThreadSummary"))}),
        "Message": obj({"id": UUID, "parent_id": nullable(UUID),
                        "role": {"type": "string", "enum": ROLES},
                        "content": TEXT, "status": {"type": "string", "enum": STATUSES},
                        "metadata": ANY_OBJECT, "created_at": TIMESTAMP},
                       {"reasoning": nullable(TEXT), "reasoning_ms": nullable(COUNT),
                        "on_branch": BOOLEAN, "version": COUNT, "versions": COUNT,
                        "version_ids": array(UUID)},
                       description="An assistant message also has `reasoning` and "
                                   "`reasoning_ms` (null when it had none). In a thread's "
                                   "list: whether it is on the thread's current branch, "
                                   "which of its versions it is (from 1, oldest first), "
                                   "how many there are and their ids."),
        "MessageList": obj({"messages": array(ref("Message"))}),
        "NewMessage": obj({"content": {"type": "string", "minLength": 1,
                                       "maxLength": max_content_chars,
                                       "description": "Some text other than white space, "
                                                      "without NUL."}},
                          {"model": {"type": "string", "minLength": 1,
                                     "description": "One of `GET /api/models`."},
                           "edit_of": {**UUID, "description": "Edit: the text is a new "
                                       "version of this question of the user's."}}),
        "Regeneration": obj(optional={"model": {"type": "string", "minLength": 1,
                                                "description": "One of `GET /api/models`."}}),
        "Autonomy": obj(optional={
            "enabled": BOOLEAN,
            "idle_seconds": {"type": "integer", "minimum": MIN_IDLE_SECONDS,
                             "maximum": MAX_IDLE_SECONDS},
            "max_followups": {"type": "integer", "minimum": 0,
                              "maximum": MAX_FOLLOWUPS_LIMIT}},
            closed=True),
        "ThreadPatch": {**obj(optional={"title": {**title, "minLength": 1},
                                        "autonomy": {**ref("Autonomy"), "minProperties": 1}},
                              closed=True), "minProperties": 1},
        "ThreadPatched": obj({"id": UUID, "title": nullable(TEXT), "autonomy": ANY_OBJECT}),
        "ModelChoices": obj({"models": array(obj({"name": TEXT})), "default": nullable(TEXT)}),
        "StopOutcome": obj({"message_id": UUID, "status": TEXT}),
        "UsageFigures": _figures(),
        "UsageReport": obj({"user_id": TEXT, "start": DAY, "end": DAY,
                            "group_by": {"type": "string", "enum": ["day", "model"]},
                            "totals": ref("UsageFigures"), "rows": array(ANY_OBJECT),
                            "messages": obj({"total_tokens": COUNT, "message_count": COUNT,
                                             "conversation_count": COUNT,
                                             "first_message": nullable(TIMESTAMP),
                                             "last_message": nullable(TIMESTAMP)})}),
        "AdminUsageReport": obj({"start": DAY, "end": DAY, "group_by": array(TEXT),
                                 "user_ids": array(TEXT),
                                 "source": {"type": "string", "enum": ["rollup", "llm_calls"]},
                                 "totals": ref("UsageFigures"), "rows": array(ANY_OBJECT),
                                 "page": obj({"offset": COUNT, "limit": nullable(COUNT),
                                              "total_rows": COUNT,
                                              "next_offset": nullable(COUNT)})}),
        "RefusalReport": obj({"start": DAY, "end": DAY,
                              "totals": {"type": "object", "additionalProperties": COUNT},
                              "total": COUNT,
                              "rows": array(obj({"day": DAY, "reason": TEXT,
                                                 "refusal_count": COUNT}))}),
        "ModelServerState": obj({"server": TEXT,
                                 "state": {"type": "string",
                                           "enum": ["healthy", "cooling_down", "unreachable"]},
                                 "cooldown_until": nullable(TIMESTAMP), "requests": COUNT,
                                 "failures": COUNT}),
    }


_CSV_OR_JSON = "JSON, or with `format=csv` every row as CSV."


def _json_or_csv(schema: str) -> Schema:
    return {"description": _CSV_OR_JSON,
            "content": {JSON: {"schema": ref(schema)}, CSV: {"schema": TEXT}}}


#: The events of a turn's stream, in their order; `error` also ends a stream cut short.
TURN_EVENTS = ["message_start", "reasoning", "delta", "metadata", "usage", "message_end",
               "error"]


#: A query flag's values (app.api.bodies.flag): `true`, `1` and `yes` switch it on.
FLAG_VALUES: Schema = {"type": "string", "enum": ["true", "false", "1", "0", "yes", "no"]}


def paths() -> dict[str, Schema]:
    turn_stream = event_stream(
        "The turn's events: `message_start`, `reasoning` and `delta` (with ids), `metadata`, "
        "`usage`, then `message_end` or `error` (docs/api.md, The stream).", TURN_EVENTS)
    return {
        "/healthz": {"get": operation(
            "native", "healthz", "The process is up", tag="process", secured=False,
            responses={"200": json_response("Up.", obj({"status": {"const": "ok"}}))})},
        "/readyz": {"get": operation(
            "native", "readyz", "The database answers and is migrated", tag="process",
            secured=False, responses={
                "200": json_response("Ready.", obj({
                    "status": {"const": "ready"},
                    "model_servers": array(ref("ModelServerState"))})),
                "503": json_response("Not ready: `error.code` `database_unreachable` or "
                                     "`database_not_migrated`.", obj({
                                         "status": {"const": "not_ready"},
                                         "error": obj({"code": TEXT, "message": TEXT}),
                                         "model_servers": array(ref("ModelServerState"))}))})},
        "/metrics": {"get": operation(
            "native", "metrics", "Prometheus metrics", tag="process", secured=False,
            responses={"200": {"description": "The Prometheus text format.",
                               "content": {"text/plain": {"schema": TEXT}}}})},
        "/openapi.json": {"get": operation(
            "native", "openapi", "This document", tag="process", secured=False,
            responses={"200": json_response("The OpenAPI 3.1 document.", ANY_OBJECT)})},
        "/api/threads": {
            "post": operation(
                "native", "createThread", "Create a thread", tag="threads",
                body=ref("NewThread"), body_required=False,
                refusals=(400, 413, 415, 422),
                responses={"201": json_response("Created.", ref("ThreadCreated"))}),
            "get": operation(
                "native", "listThreads", "The user's threads, most recent first",
                tag="threads", refusals=(422,),
                parameters=[query_parameter(
                    "q", {"type": "string", "maxLength": MAX_QUERY_CHARS},
                    "Only threads whose title or a visible message holds these words."),
                    query_parameter(
                        "origin", {"type": "string", "enum": [*ORIGINS, "all"]},
                        "`chat` (the default: the page's chats, made by POST /api/threads), "
                        "`responses` (made by stored Responses API calls) or `all`.")],
                responses={"200": json_response("The threads.", ref("ThreadList"))})},
        "/api/threads/{thread_id}": {
            "parameters": [THREAD_ID],
            "delete": operation(
                "native", "deleteThread", "Delete a thread", tag="threads", refusals=(404,),
                responses={"204": {"description": "Deleted."}}),
            "patch": operation(
                "native", "patchThread", "Rename a thread or set its autonomy",
                tag="threads", body=ref("ThreadPatch"), refusals=(400, 404, 413, 415, 422),
                responses={"200": json_response("The thread as changed.",
                                                ref("ThreadPatched"))})},
        "/api/threads/{thread_id}/messages": {
            "parameters": [THREAD_ID],
            "get": operation(
                "native", "threadMessages", "The messages of the thread's current branch in order",
                tag="threads",
                refusals=(404,),
                parameters=[query_parameter("include_synthetic", FLAG_VALUES,
                                            "Also show synthetic follow-up prompts."),
                            query_parameter("tree", FLAG_VALUES,
                                            "Every version of every message, not only the "
                                            "thread's current branch.")],
                responses={"200": json_response("The messages.", ref("MessageList"))}),
            "post": operation(
                "native", "postMessage", "Send a message; the answer streams", tag="turns",
                body=ref("NewMessage"),
                refusals=(400, 403, 404, 409, 413, 415, 422, 429),
                responses={"200": turn_stream})},
        "/api/threads/{thread_id}/messages/{message_id}": {
            "parameters": [THREAD_ID, MESSAGE_ID],
            "delete": operation(
                "native", "takeBackLastExchange", "Take back the last exchange (edit and "
                "resend)", tag="threads", refusals=(404, 409),
                responses={"204": {"description": "Taken back."}})},
        "/api/threads/{thread_id}/messages/{message_id}/stream": {
            "parameters": [THREAD_ID, MESSAGE_ID],
            "get": operation(
                "native", "resumeStream", "Resume an answer's stream", tag="turns",
                refusals=(400, 404, 409, 410),
                parameters=[
                    header_parameter("Last-Event-ID", {"type": "string", "pattern": r"^\d+$"},
                                     "The id of the last event received."),
                    query_parameter("last_event_id", {"type": "string",
                                                      "pattern": r"^\d+$"},
                                    "As `Last-Event-ID`, which wins when both are sent.")],
                responses={"200": event_stream(
                    "The turn's events after that id, then live; or one `catch_up` event "
                    "with the stored message.", [*TURN_EVENTS, "catch_up"])})},
        "/api/threads/{thread_id}/messages/{message_id}/continue": {
            "parameters": [THREAD_ID, MESSAGE_ID],
            "post": operation(
                "native", "continueAnswer", "Finish the thread's cut last answer in place; "
                "the continuation streams", tag="turns", refusals=(404, 409, 429),
                responses={"200": turn_stream})},
        "/api/threads/{thread_id}/messages/{message_id}/regenerate": {
            "parameters": [THREAD_ID, MESSAGE_ID],
            "post": operation(
                "native", "regenerateAnswer", "A new answer to the same question, a version "
                "beside this one; it streams", tag="turns", body=ref("Regeneration"),
                body_required=False, refusals=(400, 403, 404, 409, 413, 415, 422, 429),
                responses={"200": turn_stream})},
        "/api/threads/{thread_id}/messages/{message_id}/show": {
            "parameters": [THREAD_ID, MESSAGE_ID],
            "post": operation(
                "native", "showVersion", "Move the thread's branch to this version",
                tag="threads", refusals=(404, 409),
                responses={"200": json_response("The thread's messages as they now show.",
                                                ref("MessageList"))})},
        "/api/threads/{thread_id}/messages/{message_id}/stop": {
            "parameters": [THREAD_ID, MESSAGE_ID],
            "post": operation(
                "native", "stopTurn", "End a running answer now", tag="turns",
                refusals=(404, 409),
                responses={"200": json_response("Stopped; its final status.",
                                                ref("StopOutcome")),
                           "202": json_response("Passed on to the process that runs it.",
                                                ref("StopOutcome"))})},
        "/api/threads/{thread_id}/events": {
            "parameters": [THREAD_ID],
            "get": operation(
                "native", "threadEvents", "New visible messages of the thread, live",
                tag="threads", refusals=(404,),
                responses={"200": event_stream(
                    "`ready` once subscribed, then a `message` event per new message.",
                    ["ready", "message", "error"])})},
        "/api/models": {"get": operation(
            "native", "listModels", "The models this key may pick", tag="turns",
            responses={"200": json_response("The models and the default.",
                                            ref("ModelChoices"))})},
        "/api/usage": {"get": operation(
            "native", "myUsage", "The caller's usage", tag="usage", refusals=(422,),
            parameters=[START, END, GROUP_BY],
            responses={"200": json_response("The usage.", ref("UsageReport"))})},
        "/api/admin/usage": {"get": operation(
            "native", "adminUsage", "Any user's usage (admin keys)", tag="usage",
            refusals=(403, 422),
            parameters=[{**query_parameter("user_id", {"type": "string", "minLength": 1,
                                                       "maxLength": 255},
                                           "The user."), "required": True},
                        START, END, GROUP_BY],
            responses={"200": json_response("The usage.", ref("UsageReport"))})},
        "/api/admin/usage/report": {"get": operation(
            "native", "adminUsageReport", "Every user's usage, grouped and paged (admin keys)",
            tag="usage", refusals=(403, 422),
            parameters=[
                START, END,
                query_parameter("group_by", {"type": "string"},
                                "One or two of day, user, model, stage, comma-separated."),
                query_parameter("limit", {"type": "integer", "minimum": 1,
                                          "maximum": MAX_LIMIT}, "Rows per page."),
                query_parameter("offset", {"type": "integer", "minimum": 0},
                                "Rows skipped."),
                {**query_parameter("user_id", array({"type": "string", "minLength": 1,
                                                     "maxLength": 255},
                                                    maxItems=MAX_USERS),
                                   "Only these users."), "style": "form", "explode": True},
                FORMAT],
            responses={"200": _json_or_csv("AdminUsageReport")})},
        "/api/admin/refusals": {"get": operation(
            "native", "adminRefusals", "Refused turn requests per day and reason (admin "
            "keys)", tag="usage", refusals=(403, 422), parameters=[START, END, FORMAT],
            responses={"200": _json_or_csv("RefusalReport")})},
    }
