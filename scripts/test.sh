#!/usr/bin/env bash
# The whole suite: system packages, real services on loopback, lint, types, import contracts, tests
# on SQLite, the API tests again on PostgreSQL 15, then the services are stopped by PID whatever happened.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PY=.venv/bin/python
export TEST_OUTPUT_DIR="${TEST_OUTPUT_DIR:-$PWD/var/test-output}"
mkdir -p "$TEST_OUTPUT_DIR"

scripts/install_system.sh
trap 'scripts/services.sh stop || true' EXIT
scripts/services.sh start
eval "$(scripts/services.sh env)"

echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy --strict"
.venv/bin/mypy
echo "== import contracts"
.venv/bin/lint-imports

echo "== pytest (SQLite, every test)"
$PY -m pytest -q -p no:randomly --junitxml="$TEST_OUTPUT_DIR/junit-sqlite.xml" "$@"

echo "== pytest (PostgreSQL 15, API and service tests)"
DATABASE_URL="$TEST_DATABASE_URL" $PY -m pytest -q -m "api" --junitxml="$TEST_OUTPUT_DIR/junit-postgres.xml"
