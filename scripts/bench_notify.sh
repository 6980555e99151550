#!/usr/bin/env bash
# What a NOTIFY costs PostgreSQL's commits, measured with pgbench: 20 clients for 10 s, each
# transaction a one-row UPDATE, (1) alone, (2) with a NOTIFY in the same transaction (what
# a finish did before the events bus sent its NOTIFY apart: app/store/notify.py), (3) with
# the NOTIFY after the commit, in a statement of its own, sync or (4) async commit. Twice
# each, interleaved. Uses a scratch database of its own on the server it is given.
#
#     scripts/bench_notify.sh [HOST] [USER]      # default 127.0.0.1 postgres
set -euo pipefail
host="${1:-127.0.0.1}"; user="${2:-postgres}"; db="notify_bench_$$"
work="$(mktemp -d)"
trap 'psql -q -h "$host" -U "$user" -d postgres -c "DROP DATABASE IF EXISTS $db" || true; rm -rf "$work"' EXIT
update='\set id random(1, 1000)
BEGIN;
UPDATE notify_bench SET n = n + 1 WHERE id = :id;'
notify="SELECT pg_notify('chatgate_messages', '{\"t\":\"x\",\"m\":[]}');"
printf '%s\nCOMMIT;\n' "$update" > "$work/alone.sql"
printf '%s\n%s\nCOMMIT;\n' "$update" "$notify" > "$work/notify_inside.sql"
printf '%s\nCOMMIT;\n%s\n' "$update" "$notify" > "$work/notify_after.sql"
printf '%s\nCOMMIT;\nSELECT set_config(%s, %s, true), %s\n' "$update" "'synchronous_commit'" \
    "'off'" "${notify#SELECT }" > "$work/notify_after_async.sql"
psql -q -h "$host" -U "$user" -d postgres -c "CREATE DATABASE $db"
psql -q -h "$host" -U "$user" -d "$db" \
    -c "CREATE TABLE notify_bench (id int PRIMARY KEY, n int NOT NULL DEFAULT 0)" \
    -c "INSERT INTO notify_bench (id) SELECT generate_series(1, 1000)"
for round in 1 2; do
    for case in alone notify_inside notify_after notify_after_async; do
        tps=$(pgbench -h "$host" -U "$user" -n -c 20 -j 2 -T 10 -f "$work/$case.sql" "$db" 2>&1 \
              | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
        printf 'round %s  %-20s %10.0f commits/s\n' "$round" "$case" "$tps"
    done
done
