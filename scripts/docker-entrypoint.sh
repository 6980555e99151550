#!/bin/sh
# Container entry point: bring the schema to head, then serve with N uvicorn workers.
#   CHATGATE_WORKERS (2 on PostgreSQL, 1 on SQLite)
#                                      uvicorn worker processes; above 1 on SQLite is refused
#                                      (app.serve.check_workers says why)
#   CHATGATE_PORT (8000)               listening port
#   CHATGATE_MIGRATE (1)               0: skip `alembic upgrade head` (run it once, as a job,
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
python -c "import sys; from app.serve import check_workers; check_workers(int(sys.argv[1]), sys.argv[2])" \
    "$workers" "$database" || exit 2
if [ "$workers" -gt 1 ] && [ -z "${PROMETHEUS_MULTIPROC_DIR:-}" ]; then
    export PROMETHEUS_MULTIPROC_DIR=/tmp/chatgate-prometheus
fi
if [ -n "${PROMETHEUS_MULTIPROC_DIR:-}" ]; then
    # Values of an earlier run (a restarted container) would be merged into this one's.
    mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
    find "$PROMETHEUS_MULTIPROC_DIR" -mindepth 1 -delete
fi
if [ "${CHATGATE_MIGRATE:-1}" = "1" ]; then
    alembic upgrade head
fi
exec uvicorn app.main:create_app --factory \
    --host 0.0.0.0 --port "${CHATGATE_PORT:-8000}" \
    --workers "$workers" --proxy-headers --no-access-log \
    --timeout-graceful-shutdown "${CHATGATE_GRACEFUL_SHUTDOWN_S:-5}"
