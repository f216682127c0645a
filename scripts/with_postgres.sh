#!/usr/bin/env bash
# Run a command against a throw-away PostgreSQL 15 cluster on 127.0.0.1:$PG_PORT (default 5442), which
# is dropped when the command ends, however it ends.
#
# Debian's pg_virtualenv (postgresql-common) does the work: it creates the cluster with pg_createcluster
# (as the postgres user when run as root, since PostgreSQL refuses to run as root), starts it and waits
# for it, runs the command, prints the server log's tail when the command fails, and stops and drops the
# cluster at exit, on INT, TERM and HUP too. -t keeps the cluster in a temporary directory even as root,
# so that runs side by side never share /etc/postgresql. The cluster is tuned for speed over durability
# (fsync off, from pg_virtualenv; the rest below): it holds test data only.
#
# The command sees DATABASE_URL, which the site and pytest-django read, and TEST_DATABASE_URL with the
# same value, which benchmarks read (they point DATABASE_URL at a database of their own on the cluster);
# the database is `postgres`, the role the superuser `postgres` with a generated password.
#
# PG_SETTINGS adds server settings, space-separated name=value pairs: a benchmark of a large workspace wants
# the memory a production server has (docs/deploy.md), e.g. PG_SETTINGS="shared_buffers=4GB effective_cache_size=12GB".
#
# Usage: scripts/with_postgres.sh COMMAND [ARG...]
#   e.g. scripts/with_postgres.sh .venv/bin/python -m pytest -m api
set -euo pipefail

if [[ $# -eq 0 ]]; then
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
fi
PG_PORT="${PG_PORT:-5442}"
[[ "$PG_PORT" =~ ^[0-9]+$ ]] || { echo "[with_postgres] PG_PORT must be a TCP port, got '$PG_PORT'" >&2; exit 2; }
command -v pg_virtualenv >/dev/null || { echo "[with_postgres] pg_virtualenv not found: run scripts/install_system.sh" >&2; exit 1; }

extra=()
for setting in ${PG_SETTINGS:-}; do
    [[ "$setting" =~ ^[a-z_]+=[A-Za-z0-9._]+$ ]] || { echo "[with_postgres] PG_SETTINGS: '$setting' is not name=value" >&2; exit 2; }
    extra+=(-o "$setting")
done

# listen_addresses has a leading space because pg_createcluster writes a value that looks like a number
# (127.0.0.1) unquoted, which postgresql.conf rejects; PostgreSQL ignores the space.
# shellcheck disable=SC2016  # $PGUSER and the rest expand inside, where pg_virtualenv has set them
PGPORT="$PG_PORT" exec pg_virtualenv -t -v 15 \
    -c '--locale=C.UTF-8 --encoding=UTF8' \
    -o 'listen_addresses= 127.0.0.1' \
    -o synchronous_commit=off -o full_page_writes=off -o wal_level=minimal -o max_wal_senders=0 "${extra[@]}" \
    -- bash -c 'export DATABASE_URL="postgres://$PGUSER:$PGPASSWORD@127.0.0.1:$PGPORT/postgres"
                export TEST_DATABASE_URL="$DATABASE_URL"
                exec "$@"' with_postgres "$@"
