# Sourced by scripts/test: starts the local PostgreSQL when it is installed but down,
# makes sure the test database exists, and installs Debian's chromium for the browser test and
# Debian's pgbouncer for the tests behind PgBouncer (tests/support/pgbouncer.py starts its own).
pg_up() { python3 - <<'PY'
import socket, sys
s = socket.socket(); s.settimeout(1)
try:
    s.connect(("127.0.0.1", 5432)); sys.exit(0)
except OSError:
    sys.exit(1)
PY
}
if ! pg_up; then
    if command -v pg_ctlcluster >/dev/null 2>&1; then
        echo "services: starting PostgreSQL" >&2
        pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
        for _ in $(seq 1 30); do pg_up && break; sleep 1; done
    fi
fi
if pg_up && command -v psql >/dev/null 2>&1; then
    psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" \
        | grep -q 1 || psql -h 127.0.0.1 -U postgres -d postgres -c "CREATE DATABASE test" >&2 || true
fi
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "services: installing Debian chromium for the browser test" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >&2 || true
fi
if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ] \
        && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "services: installing Debian pgbouncer for the tests behind PgBouncer" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer) >&2 \
        || true
fi
