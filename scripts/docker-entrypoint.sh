#!/bin/sh
# Container entry point: bring the schema to head, then serve with N uvicorn workers.
set -eu
alembic upgrade head
exec uvicorn app.main:create_app --factory \
    --host 0.0.0.0 --port "${CHATGATE_PORT:-8000}" \
    --workers "${CHATGATE_WORKERS:-2}" --proxy-headers --no-access-log
