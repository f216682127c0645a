"""Shared set-up for benchmarks: a Django environment on a throw-away database, SQLite or PostgreSQL.

SQLite (the default) keeps each benchmark's database as a file under var/bench/. PostgreSQL is a
throw-away PostgreSQL 15 cluster started the way `make test` starts it (scripts/with_postgres.sh,
127.0.0.1:$PG_PORT, default 5442): each benchmark gets its own database on it, named after the SQLite file
(``surfacing.sqlite3`` -> ``bench_surfacing``), so both backends can hold the same generated workspaces side
by side. A benchmark run outside scripts/with_postgres.sh runs itself again under it, and the cluster, with
what was generated on it, is dropped when the benchmark ends; to keep it across runs, run them in one
shell under it: ``scripts/with_postgres.sh bash``.

Redis and FalkorDB are started the way the tests start them (tests/services.py) when a benchmark asks for
them (``redis_url()``, ``bolt_uri()``) and nothing names one, and stopped when it exits.

    parser = argparse.ArgumentParser(...)
    add_database_argument(parser)          # --database sqlite|postgres (env BENCH_DATABASE)
    db = django_setup("surfacing.sqlite3", fresh=args.fresh, database=args.database)
    db.url                                 # DATABASE_URL for a server subprocess
    db.save_copy("pristine"); db.restore_copy("pristine")   # file copy / CREATE DATABASE ... TEMPLATE
    db.copy_url("pristine"); db.drop_copy("pristine")       # serve a copy, delete it
"""

from __future__ import annotations

import argparse
import atexit
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The site's packages and tests/services.py import from the repository root.
sys.path.insert(0, str(ROOT))
BENCH_DIR = ROOT / "var" / "bench"
DATABASES = ("sqlite", "postgres")


def add_database_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database",
        choices=DATABASES,
        default=os.environ.get("BENCH_DATABASE", "sqlite"),
        help="backend to measure: sqlite (a file under var/bench/) or postgres (a throw-away cluster, started the "
        "way `make test` starts it unless this runs under scripts/with_postgres.sh); default $BENCH_DATABASE "
        "or sqlite",
    )


def postgres_server() -> str:
    """The base URL (no database name) of the cluster this process runs under (scripts/with_postgres.sh sets
    TEST_DATABASE_URL); without one, the benchmark starts over under scripts/with_postgres.sh, as `make test`
    runs its PostgreSQL tests, and its child processes inherit the cluster."""
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        return url.rsplit("/", 1)[0]
    script = ROOT / "scripts" / "with_postgres.sh"
    print(f"[bench] no TEST_DATABASE_URL: running again under {script.relative_to(ROOT)}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(script, [str(script), sys.executable, *sys.argv])


def redis_url() -> str:
    """TEST_REDIS_URL, or else a redis-server started here the way the tests start it (tests/services.py) on
    a free port and stopped when this process exits; its URL goes to TEST_REDIS_URL for child processes."""
    url = os.environ.get("TEST_REDIS_URL")
    if url:
        return url
    from tests import services

    datadir = BENCH_DIR / "redis"
    datadir.mkdir(parents=True, exist_ok=True)
    server = services.start("redis", services.redis(free_port(), datadir))
    atexit.register(server.stop)
    os.environ["TEST_REDIS_URL"] = url = f"redis://{services.HOST}:{server.port}/0"
    return url


def bolt_uri() -> str:
    """TEST_NEO4J_URI, or else FalkorDB's Bolt listener started here the way the tests start it and stopped
    when this process exits. It only runs inside scripts/isolated.sh (see tests/services.py), whose network
    namespace is this process's own: the tests' ports (FALKOR_PORT, BOLT_PORT) are free there."""
    uri = os.environ.get("TEST_NEO4J_URI")
    if uri:
        return uri
    from tests import services

    datadir = BENCH_DIR / "falkordb"
    datadir.mkdir(parents=True, exist_ok=True)
    server = services.start("falkordb", services.falkordb(services.FALKOR_PORT, services.BOLT_PORT, datadir))
    atexit.register(server.stop)
    os.environ["TEST_NEO4J_URI"] = server.uri
    return server.uri


@dataclass(frozen=True)
class BenchDatabase:
    """Where a benchmark's data lives. ``label`` names it in reports ("sqlite" / "postgres")."""

    label: str
    url: str
    path: Path | None  # the SQLite file; None on PostgreSQL
    name: str  # the PostgreSQL database name, or the SQLite file's stem

    def _admin_sql(self, *statements: str) -> None:
        import psycopg

        base = self.url.rsplit("/", 1)[0]
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            for sql in statements:
                conn.execute(sql)  # type: ignore[arg-type]

    def copy_exists(self, tag: str) -> bool:
        if self.path is not None:
            return self._copy_path(tag).exists()
        import psycopg

        base = self.url.rsplit("/", 1)[0]
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            row = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [self._copy_name(tag)]).fetchone()
        return row is not None

    def save_copy(self, tag: str) -> None:
        """Keep the database as it is now under ``tag`` (closes Django's connections first)."""
        from django.db import connections

        connections.close_all()
        if self.path is not None:
            shutil.copyfile(self.path, self._copy_path(tag))
            return
        copy = self._copy_name(tag)
        self._admin_sql(f'DROP DATABASE IF EXISTS "{copy}"', f'CREATE DATABASE "{copy}" TEMPLATE "{self.name}"')

    def restore_copy(self, tag: str) -> None:
        """Replace the database with the copy saved under ``tag`` (closes Django's connections first, when
        Django is set up: a benchmark may restore before it sets Django up)."""
        from django.conf import settings
        from django.db import connections

        if settings.configured:
            connections.close_all()
        if self.path is not None:
            for suffix in ("-wal", "-shm"):
                Path(str(self.path) + suffix).unlink(missing_ok=True)
            shutil.copyfile(self._copy_path(tag), self.path)
            return
        self._admin_sql(
            f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)',
            f'CREATE DATABASE "{self.name}" TEMPLATE "{self._copy_name(tag)}"',
        )

    def copy_url(self, tag: str) -> str:
        """The DATABASE_URL of the copy saved under ``tag`` (to serve it without touching this database)."""
        if self.path is not None:
            return f"sqlite:///{self._copy_path(tag)}"
        return f"{self.url.rsplit('/', 1)[0]}/{self._copy_name(tag)}"

    def drop_copy(self, tag: str) -> None:
        """Delete the copy saved under ``tag`` (its file and WAL, or its PostgreSQL database)."""
        if self.path is not None:
            for suffix in ("", "-wal", "-shm"):
                Path(str(self._copy_path(tag)) + suffix).unlink(missing_ok=True)
            return
        self._admin_sql(f'DROP DATABASE IF EXISTS "{self._copy_name(tag)}" WITH (FORCE)')

    def _copy_path(self, tag: str) -> Path:
        assert self.path is not None
        return self.path.with_name(f"{self.path.stem}-{tag}{self.path.suffix}")

    def _copy_name(self, tag: str) -> str:
        return f"{self.name}__{re.sub(r'[^a-z0-9_]', '_', tag.lower())}"[:63]


def bench_database(db_name: str, *, fresh: bool, database: str = "sqlite") -> BenchDatabase:
    """The database for ``db_name`` (a SQLite file name under var/bench/), created empty when ``fresh``."""
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    path = BENCH_DIR / db_name
    if database == "sqlite":
        if fresh:
            for suffix in ("", "-wal", "-shm"):
                Path(str(path) + suffix).unlink(missing_ok=True)
        return BenchDatabase("sqlite", f"sqlite:///{path}", path, path.stem)
    if database != "postgres":
        raise ValueError(f"--database must be one of {', '.join(DATABASES)}, got {database!r}")
    name = "bench_" + re.sub(r"[^a-z0-9_]", "_", path.stem.lower())
    db = BenchDatabase("postgres", f"{postgres_server()}/{name}", None, name)
    import psycopg

    with psycopg.connect(db.url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        if fresh:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    return db


def django_setup(db_name: str, *, fresh: bool, database: str = "sqlite") -> BenchDatabase:
    """Point DATABASE_URL at the benchmark's database (see bench_database), set Django up and migrate."""
    db = bench_database(db_name, fresh=fresh, database=database)
    os.environ["DATABASE_URL"] = db.url
    # Each bench database numbers its workspaces from 1: their persisted vector indexes live apart.
    suffix = "" if database == "sqlite" else "-postgres"
    os.environ.setdefault("VECTOR_INDEX_DIR", str(BENCH_DIR / f"{Path(db_name).stem}{suffix}-vectors"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smartmemory_site.settings")
    os.environ.setdefault("SIGNAL_BACKGROUND_FLUSH", "false")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return db


def sidecar_path(stem: str, database: str) -> Path:
    """A JSON file describing generated data, one per backend (both may hold differently generated data)."""
    return BENCH_DIR / (f"{stem}.json" if database == "sqlite" else f"{stem}-{database}.json")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_daphne(database_url: str, env: dict[str, str] | None = None, timeout: float = 90.0) -> tuple[Any, int]:
    """One daphne server of the site on a free 127.0.0.1 port, once it accepts connections: (process, port)."""
    port = free_port()
    server = subprocess.Popen(
        [
            str(ROOT / ".venv" / "bin" / "daphne"),
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "smartmemory_site.asgi:application",
        ],
        cwd=ROOT,
        env={
            **os.environ,
            "DATABASE_URL": database_url,
            "DJANGO_SETTINGS_MODULE": "smartmemory_site.settings",
            "LOG_LEVEL": "WARNING",
            **(env or {}),
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, port
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise RuntimeError(f"daphne on port {port} did not start") from None
            time.sleep(0.2)


def stop_server(server: Any) -> None:
    server.terminate()
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.kill()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]
