#!/bin/sh
# Container entry point: bring the schema to head, then serve with N uvicorn workers, a
# listening socket each (app.gateway.workers).
#   CHATGATE_WORKERS (2 on PostgreSQL, 1 on SQLite)
#                                      uvicorn worker processes; above 1 on SQLite is refused
#                                      (app.gateway.serve.check_workers says why)
#   every CHATGATE_ setting            checked first (app.gateway.serve.prepare): a wrong one, a
#                                      database that cannot be reached or does not exist, a
#                                      port in use, is one sentence on stderr and exit 2
#   CHATGATE_DATABASE_POOL_SIZE        PostgreSQL connections per worker; unset: derived from
#                                      CHATGATE_WORKERS (exported below: every worker derives
#                                      the same share), and workers x (pool + overflow + 1)
#                                      checked against the server's max_connections at start
#   CHATGATE_PORT (8000)               listening port
#   CHATGATE_MIGRATE (1)               0: skip the migration to head (run it once, as a job,
#                                      when several instances start at the same time)
#   CHATGATE_GRACEFUL_SHUTDOWN_S (5)   SIGTERM ends open streams at once (each with a last
#                                      event); what is still open after this long is cut, and
#                                      the process exits before `docker stop`'s 10 s SIGKILL
#   PROMETHEUS_MULTIPROC_DIR           metrics of all workers merged (docs/production.md);
#                                      defaults to /tmp/chatgate-prometheus with > 1 worker
set -eu
database="${CHATGATE_DATABASE_URL:-${DATABASE_URL:-sqlite://}}"
case "$database" in
    postgres*) workers="${CHATGATE_WORKERS:-2}" ;;
    *) workers="${CHATGATE_WORKERS:-1}" ;;
esac
export CHATGATE_WORKERS="$workers"
# The settings, the workers' database, the port and the database itself, checked (and the
# schema migrated) before uvicorn starts: a wrong one is one sentence on stderr and exit 2.
if [ "${CHATGATE_MIGRATE:-1}" = "1" ]; then
    python -m app.gateway.serve --prepare-only --host 0.0.0.0 --port "${CHATGATE_PORT:-8000}"
else
    python -m app.gateway.serve --prepare-only --no-migrate --host 0.0.0.0 --port "${CHATGATE_PORT:-8000}"
fi
if [ "$workers" -gt 1 ] && [ -z "${PROMETHEUS_MULTIPROC_DIR:-}" ]; then
    export PROMETHEUS_MULTIPROC_DIR=/tmp/chatgate-prometheus
fi
if [ -n "${PROMETHEUS_MULTIPROC_DIR:-}" ]; then
    # Values of an earlier run (a restarted container) would be merged into this one's.
    mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
    find "$PROMETHEUS_MULTIPROC_DIR" -mindepth 1 -delete
fi
exec python -m app.gateway.workers app.gateway.main:create_app \
    --host 0.0.0.0 --port "${CHATGATE_PORT:-8000}" \
    --workers "$workers" --no-access-log \
    --timeout-graceful-shutdown "${CHATGATE_GRACEFUL_SHUTDOWN_S:-5}"
