#!/usr/bin/env bash
# The whole suite: system packages, then, inside scripts/isolated.sh (network and PID namespaces of its own:
# whatever runs there listens on loopback only, and nothing it starts outlives it), lint, types, import
# contracts, every test on SQLite, and the API tests again on a throw-away PostgreSQL 15 cluster
# (scripts/with_postgres.sh). Each pytest run starts Redis and FalkorDB itself for the tests that need them,
# and stops them by their process when it ends, whatever happened (tests/services.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ "${SMARTMEMORY_ISOLATED:-}" != 1 ]]; then
    scripts/install_system.sh # apt needs the network, which the namespace does not have
    exec scripts/isolated.sh scripts/test.sh "$@"
fi

PY=.venv/bin/python
export TEST_OUTPUT_DIR="${TEST_OUTPUT_DIR:-$PWD/var/test-output}"
mkdir -p "$TEST_OUTPUT_DIR"

echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy --strict"
.venv/bin/mypy
echo "== import contracts"
.venv/bin/lint-imports

echo "== pytest (SQLite, every test)"
$PY -m pytest -q -p no:randomly --junitxml="$TEST_OUTPUT_DIR/junit-sqlite.xml" "$@"

echo "== pytest (PostgreSQL 15, the API tests)"
scripts/with_postgres.sh $PY -m pytest -q -m "api" --junitxml="$TEST_OUTPUT_DIR/junit-postgres.xml"
