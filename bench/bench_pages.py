"""Server time of the browser pages on a 1M-memory workspace, on SQLite or PostgreSQL.

Targets (the README's performance table): memory list p95 <= 100 ms, memory detail p95 <= 150 ms. Each request goes
through the whole Django stack in-process (test Client: middleware, session, auth, view, template),
which is the server's share of a page load; network and browser time are not included.

The workspace is generated once by the database itself (set-based INSERT ... SELECT, the same
distribution on both backends) and cached: as var/bench/pages-<DATA_VERSION>-<count>.sqlite3 on SQLite, as
the database bench_pages_v<N>_<count> on PostgreSQL (the cluster `make test` starts), so reruns
start measuring at once. Change DATA_VERSION when the generated data must change.

    make bench-pages                     # or: .venv/bin/python bench/bench_pages.py
    .venv/bin/python bench/bench_pages.py --memories 200000 --requests 50 --rebuild
    .venv/bin/python bench/bench_pages.py --database postgres      # or BENCH_DATABASE=postgres

Columns: wall-clock p50/p95/max, then CPU p50/p95 of this process (the view, the template and, on SQLite,
the database) and, on PostgreSQL, "db CPU": the server backend's CPU per request (mean over the
scenario, from /proc), which the process CPU does not include. When other processes share the CPUs,
wall time includes waiting for one; the CPU columns do not.

Adding pages: write a function `def my_scenarios(ctx: Context) -> list[Scenario]` and append it to
SCENARIO_BUILDERS; give its page kind a target in TARGETS_MS. The figures table and the pass/fail
line pick it up.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _setup import BENCH_DIR, BenchDatabase, add_database_argument, bench_database, django_setup, percentile

# v3: conflicts_with holds memory ids as the app writes them (with dashes); v2's hex ids made the detail
# page of such a memory fail (its link to the conflicting memory did not resolve).
DATA_VERSION = "pages-v3"
TARGETS_MS = {"list": 100.0, "detail": 150.0}

WORDS = (
    "jwt token session cookie load balancer redis postgres deploy incident latency cache kafka queue "
    "billing invoice customer refund gateway auth review decision migration schema index rollback "
    "dashboard alert grafana kubernetes pod node scale memory budget roadmap goal meeting dana lee "
    "release canary rollout feature flag tracing metrics logs retention backup restore failover"
).split()
TYPES = ["episodic", "semantic", "fact", "event", "decision", "observation", "preference", "procedural"]
EDGE_TYPES = ["RELATED", "MENTIONS", "PART_OF", "FOLLOWS", "DERIVED_FROM", "CO_RETRIEVED"]


# -- data ------------------------------------------------------------------------------------------


def _cache_path(count: int) -> Path:
    return BENCH_DIR / f"{DATA_VERSION}-{count}.sqlite3"


def _is_complete(path: Path, database: str) -> bool:
    """Whether the cached workspace was generated to the end (bench_meta is written last)."""
    if database != "sqlite":
        return _is_complete_postgres(bench_database(path.name, fresh=False, database=database))
    if not path.exists():
        return False
    try:
        with sqlite3.connect(path) as db:
            row = db.execute("SELECT value FROM bench_meta WHERE key = 'complete'").fetchone()
    except sqlite3.Error:
        return False
    return row is not None and row[0] == DATA_VERSION


def _is_complete_postgres(db: BenchDatabase) -> bool:
    import psycopg

    with psycopg.connect(db.url) as conn:
        if conn.execute("SELECT to_regclass('bench_meta')").fetchone() in (None, (None,)):
            return False
        row = conn.execute("SELECT value FROM bench_meta WHERE key = 'complete'").fetchone()
    return row is not None and row[0] == DATA_VERSION


def _padded_words() -> tuple[str, int, int]:
    """All words as one fixed-width string, so SQL can pick word k with substr (no Python per row)."""
    width = max(len(w) for w in WORDS) + 1
    return "".join(w.ljust(width) for w in WORDS), width, len(WORDS)


def _memory_select(workspace_id: int, count: int, start_epoch: int, span: int) -> tuple[list[str], str, list[Any]]:
    """Columns and a SELECT producing `count` random memory rows entirely inside SQLite.

    Memories: 8 types, ~5% archived, 1% pinned, 0.5% with conflicts, ~3% compressed, created over
    `span` seconds, half of them accessed since, stored activation 0.5..0.95. Fields without an
    expression here get their model default, so new model fields need no change.
    """
    from django.db import connection

    from memories.models import Memory

    words, width, n_words = _padded_words()

    # Only [a-z] and spaces: safe to inline as a literal.
    def word(k: str) -> str:
        return f"rtrim(substr('{words}', ({k}) * {width} + 1, {width}))"

    def rand(n: int) -> str:
        return f"(abs(random()) % {n})"

    content = " || ' ' || ".join(word(rand(n_words)) for _ in range(14))
    random_uuid = " || '-' || ".join(f"lower(hex(randomblob({n})))" for n in (4, 2, 2, 2, 6))
    types = ",".join(f'"{t}"' for t in TYPES)
    expressions = {
        "id": "lower(hex(randomblob(16)))",
        "workspace_id": str(workspace_id),
        "memory_type": f"json_extract('[{types}]', '$[' || {rand(len(TYPES))} || ']')",
        "content": "upper(substr(r.words, 1, 1)) || substr(r.words, 2) || '.'",
        "subject": word(rand(n_words)),
        "tags": f"CASE WHEN {rand(10)} < 3 THEN json_array({word(rand(n_words))}) ELSE '[]' END",
        "origin": "CASE WHEN r.k % 5 = 0 THEN 'evolver:Summary' ELSE 'api:bench' END",
        "origin_tier": "CASE WHEN r.k % 5 = 0 THEN 2 ELSE 1 END",
        "status": f"CASE WHEN {rand(100)} < 5 THEN 'archived' ELSE 'active' END",
        "tier": f'json_extract(\'["hot","warm","warm","cold"]\', \'$[\' || {rand(4)} || \']\')',
        "compression_tier": f"CASE WHEN r.k % 5 = 0 AND {rand(100)} < 15 THEN 1 + {rand(3)} ELSE 0 END",
        "pinned": f"{rand(100)} = 0",
        "activation_score": "r.score",
        "activation_last_boost_at": "datetime(r.boosted, 'unixepoch')",
        "activation_boost_count": "CAST(round((r.score - 0.5) / 0.05) AS INTEGER)",
        # memories.algorithms.sortkey: ln(score) + ln2 * hours_since_epoch(last_boost) / half_life.
        "activation_sort_key": "ln(r.score) + ln(2.0) * (r.boosted / 3600.0) / 720.0",
        "access_count": f"CASE WHEN r.k % 2 = 0 THEN 1 + {rand(40)} ELSE 0 END",
        "last_accessed": "CASE WHEN r.k % 2 = 0 THEN datetime(r.boosted, 'unixepoch') END",
        # A memory id as the app stores one here (str(uuid), with dashes): the detail page links to it.
        "conflicts_with": f"CASE WHEN {rand(200)} = 0 THEN json_array({random_uuid}) ELSE '[]' END",
        "created_at": "datetime(r.created, 'unixepoch')",
        "updated_at": "datetime(r.created, 'unixepoch')",
        "search_indexed": "1",
    }
    columns: list[str] = []
    values: list[str] = []
    params: list[Any] = []
    for f in Memory._meta.concrete_fields:
        columns.append(connection.ops.quote_name(f.column))
        if f.attname in expressions:
            values.append(expressions[f.attname])
        else:
            default = f.get_default() if f.has_default() else None
            values.append("%s")
            params.append(f.get_db_prep_save(default, connection))
    # MATERIALIZED: otherwise SQLite inlines the CTE and evaluates each random() once per use, so a
    # memory's last boost could land before its creation.
    sql = (
        "WITH RECURSIVE seq(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM seq WHERE k < {count}), "
        "base AS MATERIALIZED (SELECT k, {start} + abs(random()) % {span} AS created, "
        "0.5 + 0.05 * (abs(random()) % 10) AS score, {content} AS words FROM seq), "
        "r AS MATERIALIZED (SELECT k, created, score, words, "
        "created + abs(random()) % ({start} + {span} - created + 1) AS boosted FROM base) "
        "SELECT {values} FROM r"
    ).format(count=count, start=start_epoch, span=span, values=", ".join(values), content=content)
    return columns, sql, params


def _memory_select_postgres(
    workspace_id: int, first: int, last: int, start_epoch: int, span: int
) -> tuple[list[str], str, list[Any]]:
    """PostgreSQL: columns and a SELECT producing memories first..last, as _memory_select does on SQLite.

    The same distribution; ids are md5('<workspace>:<k>')::uuid (see _load_postgres). Defaults are cast to
    their column types: an untyped literal in a SELECT list is text, which jsonb and uuid columns refuse.
    """
    from django.db import connection

    from memories.models import Memory

    words = ", ".join(f"'{w}'" for w in WORDS)  # only [a-z]: safe to inline

    def rand(n: int) -> str:
        return f"floor(random() * {n})::int"

    def word() -> str:
        return f"(ARRAY[{words}])[1 + {rand(len(WORDS))}]"

    def pick(values: list[str]) -> str:
        return "(ARRAY[" + ", ".join(f"'{v}'" for v in values) + f"])[1 + {rand(len(values))}]"

    def epoch(column: str) -> str:
        return f"to_timestamp(r.{column})"

    content = " || ' ' || ".join(word() for _ in range(14))
    expressions = {
        "id": f"md5('{workspace_id}:' || r.k)::uuid",
        "workspace_id": str(workspace_id),
        "memory_type": pick(TYPES),
        "content": "upper(left(r.words, 1)) || substr(r.words, 2) || '.'",
        "subject": word(),
        "tags": f"CASE WHEN {rand(10)} < 3 THEN jsonb_build_array({word()}) ELSE '[]'::jsonb END",
        "origin": "CASE WHEN mod(r.k, 5) = 0 THEN 'evolver:Summary' ELSE 'api:bench' END",
        "origin_tier": "CASE WHEN mod(r.k, 5) = 0 THEN 2 ELSE 1 END",
        "status": f"CASE WHEN {rand(100)} < 5 THEN 'archived' ELSE 'active' END",
        "tier": pick(["hot", "warm", "warm", "cold"]),
        "compression_tier": f"CASE WHEN mod(r.k, 5) = 0 AND {rand(100)} < 15 THEN 1 + {rand(3)} ELSE 0 END",
        "pinned": f"{rand(100)} = 0",
        "activation_score": "r.score",
        "activation_last_boost_at": epoch("boosted"),
        "activation_boost_count": "round((r.score - 0.5) / 0.05)::int",
        # memories.algorithms.sortkey: ln(score) + ln2 * hours_since_epoch(last_boost) / half_life.
        "activation_sort_key": "ln(r.score) + ln(2.0) * (r.boosted / 3600.0) / 720.0",
        "access_count": f"CASE WHEN mod(r.k, 2) = 0 THEN 1 + {rand(40)} ELSE 0 END",
        "last_accessed": f"CASE WHEN mod(r.k, 2) = 0 THEN {epoch('boosted')} END",
        "conflicts_with": (
            f"CASE WHEN {rand(200)} = 0 THEN jsonb_build_array(gen_random_uuid()::text) ELSE '[]'::jsonb END"
        ),
        "created_at": epoch("created"),
        "updated_at": epoch("created"),
        "search_indexed": "true",
    }
    columns: list[str] = []
    values: list[str] = []
    params: list[Any] = []
    for f in Memory._meta.concrete_fields:
        columns.append(connection.ops.quote_name(f.column))
        if f.attname in expressions:
            values.append(expressions[f.attname])
        else:
            default = f.get_default() if f.has_default() else None
            values.append(f"%s::{f.db_type(connection)}")
            params.append(f.get_db_prep_save(default, connection))
    # MATERIALIZED: each random() is drawn once per row, so a memory's last boost never precedes its creation.
    sql = (
        "WITH base AS MATERIALIZED (SELECT k, {start} + floor(random() * {span})::bigint AS created, "
        "(0.5 + 0.05 * floor(random() * 10))::float8 AS score, {content} AS words "
        "FROM generate_series({first}, {last}) AS k), "
        "r AS MATERIALIZED (SELECT k, created, score, words, "
        "created + floor(random() * ({start} + {span} - created + 1))::bigint AS boosted FROM base) "
        "SELECT {values} FROM r"
    ).format(first=first, last=last, start=start_epoch, span=span, values=", ".join(values), content=content)
    return columns, sql, params


def generate(count: int, seed: int = 7) -> None:
    """Fill the configured database with one workspace of `count` memories and their surroundings.

    Rows are produced by the database itself (SQLite: a recursive CTE and random(); PostgreSQL:
    generate_series and random()), which writes 1M memories in a minute or two; on SQLite the FTS5 rows
    are then copied in one statement (PostgreSQL's search_vector column is generated with each row).
    Edges: one per memory on average. Detail-page extras for 500 memories: 20 evolution records and 30
    retrieval events each.
    """
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from history import audit
    from memories import services
    from memories.models import Memory

    rng = random.Random(seed)
    user = get_user_model().objects.create_user("bench", password="bench")
    workspace = services.workspace_create(owner=user, slug="bench", name="Bench 1M")
    end = datetime(2026, 6, 1, tzinfo=UTC)
    span = 2 * 365 * 24 * 3600
    start_epoch = int(end.timestamp()) - span
    started = time.perf_counter()

    def step(label: str) -> None:
        print(f"  {label} ({time.perf_counter() - started:.0f} s)", flush=True)

    load = _load_sqlite if connection.vendor == "sqlite" else _load_postgres
    with transaction.atomic(), connection.cursor() as cursor:
        load(cursor, workspace.pk, count, start_epoch, span, end, step)

    # 500 random memories: the first id at or after a random UUID (a PK seek each, no OFFSET scan).
    sampled = [
        Memory.objects.filter(workspace=workspace, pk__gte=uuid.UUID(int=rng.getrandbits(128)))
        .order_by("pk")
        .values_list("id", flat=True)
        .first()
        for _ in range(500)
    ]
    detail_ids: list[uuid.UUID] = [m for m in dict.fromkeys(sampled) if m is not None]
    with transaction.atomic():
        records = [
            audit.record_build(
                workspace=workspace,
                evolver=rng.choice(["DecayEvolver", "RetrievalEvolver", "user"]),
                action=rng.choice(["decay", "boost", "update"]),
                reason="bench history",
                input_ids=[mid],
                output_ids=[mid],
                before={str(mid): {"retention_score": 1.0 - i * 0.01, "activation_score": 0.5}},
                after={str(mid): {"retention_score": 0.99 - i * 0.01, "activation_score": 0.45}},
                now=end - timedelta(days=40 - i),
            )
            for mid in detail_ids
            for i in range(20)
        ]
        audit.records_save(records, batch_size=2000)
        with connection.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO memories_retrievalevent (workspace_id, memory_id, result_set, rank, source, query, "
                "session_id, created_at) VALUES (%s, %s, %s, %s, 'search', %s, '', %s)",
                [
                    (
                        workspace.pk,
                        mid.hex,
                        uuid.uuid4().hex,
                        rng.randint(1, 10),
                        " ".join(rng.choice(WORDS) for _ in range(3)),
                        str((end - timedelta(hours=rng.randrange(2000))).replace(tzinfo=None)),
                    )
                    for mid in detail_ids
                    for _ in range(30)
                ],
            )
    step("history and retrievals of 500 memories")
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("ANALYZE")
        else:
            # VACUUM as well: it sets the visibility map (index-only scans) and hint bits once, as autovacuum
            # would do soon after a bulk load anyway, but then in the middle of the measurements.
            cursor.execute("VACUUM (ANALYZE)")
        cursor.execute("CREATE TABLE IF NOT EXISTS bench_meta (key TEXT PRIMARY KEY, value TEXT)")
        cursor.execute(
            "INSERT INTO bench_meta (key, value) VALUES ('complete', %s), ('detail_ids', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [DATA_VERSION, ",".join(m.hex for m in detail_ids)],
        )
    step("generated")


def _load_sqlite(
    cursor: Any, workspace_id: int, count: int, start_epoch: int, span: int, end: datetime, step: Callable[[str], None]
) -> None:
    """SQLite: memories, scores, indexes, the FTS5 rows and edges, in the caller's transaction."""
    # Building an index by sorting 1M keys once is several times faster than 1M random inserts
    # into it, so the memory table's secondary indexes are dropped and recreated around the load.
    cursor.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' "
        "AND tbl_name IN ('memories_memory', 'memories_memoryscore') AND sql IS NOT NULL"
    )
    indexes = cursor.fetchall()
    for name, _ in indexes:
        cursor.execute(f'DROP INDEX "{name}"')
    # Chunks keep the materialised random rows to ~10 MB at a time.
    chunk = 100_000
    for start in range(0, count, chunk):
        columns, select, params = _memory_select(workspace_id, min(chunk, count - start), start_epoch, span)
        cursor.execute(f"INSERT INTO memories_memory ({', '.join(columns)}) {select}", params)
    cursor.execute(
        "INSERT INTO memories_memoryscore (memory_id, workspace_id, retention_score, retrieval_profile) "
        "SELECT id, workspace_id, (abs(random()) % 10000) / 10000.0, '{}' FROM memories_memory "
        "WHERE workspace_id = %s",
        [workspace_id],
    )
    step(f"{count:,} memories")
    for _, sql in indexes:
        cursor.execute(sql)
    step(f"{len(indexes)} indexes of the memory and score tables")
    cursor.execute(
        "INSERT INTO memories_fts(rowid, content, memory_id, workspace_id) "
        "SELECT rowid, content, id, workspace_id FROM memories_memory WHERE workspace_id = %s",
        [workspace_id],
    )
    cursor.execute(
        "INSERT INTO memories_fts_map(memory_id, fts_rowid) SELECT memory_id, rowid FROM memories_fts "
        "WHERE workspace_id = %s",
        [workspace_id],
    )
    step("full-text index")
    kinds = ",".join(f'"{k}"' for k in EDGE_TYPES)
    cursor.execute(
        "WITH RECURSIVE seq(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM seq WHERE k < %s), "
        "pairs AS MATERIALIZED (SELECT 1 + abs(random()) %% %s AS a, 1 + abs(random()) %% %s AS b, "
        "json_extract('[" + kinds + "]', '$[' || (abs(random()) %% " + str(len(EDGE_TYPES)) + ") || ']') AS t "
        "FROM seq) "
        "INSERT OR IGNORE INTO memories_edge (workspace_id, source_id, target_id, edge_type, weight, "
        "co_retrieval_count, created_at, metadata) "
        "SELECT %s, s.id, d.id, p.t, 0.2 + (abs(random()) %% 180) / 100.0, 0, %s, '{}' FROM pairs p "
        "JOIN memories_memory s ON s.rowid = p.a JOIN memories_memory d ON d.rowid = p.b WHERE p.a != p.b",
        [count, count, count, workspace_id, str(end.replace(tzinfo=None))],
    )
    step("edges")


def _load_postgres(
    cursor: Any, workspace_id: int, count: int, start_epoch: int, span: int, end: datetime, step: Callable[[str], None]
) -> None:
    """PostgreSQL: the same rows as _load_sqlite, in the caller's transaction.

    Memory k (1..count) gets the id md5('<workspace>:k')::uuid, uniformly spread like SQLite's random
    blobs, so edges name their ends by row number without joining the memory table.
    """
    # Foreign keys are checked at the end of each statement, not queued to the commit: CREATE INDEX refuses
    # to run on a table with pending trigger events.
    cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    # As on SQLite, secondary indexes (the GIN index of search_vector among them) are built once after the
    # load; indexes that back a constraint (primary keys, unique) stay.
    cursor.execute(
        "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.schemaname = current_schema() "
        "AND i.tablename IN ('memories_memory', 'memories_memoryscore') AND NOT EXISTS "
        "(SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname AND c.contype IN ('p', 'u', 'x'))"
    )
    indexes = cursor.fetchall()
    for name, _ in indexes:
        cursor.execute(f'DROP INDEX "{name}"')
    chunk = 100_000
    for first in range(1, count + 1, chunk):
        columns, select, params = _memory_select_postgres(
            workspace_id, first, min(first + chunk - 1, count), start_epoch, span
        )
        cursor.execute(f"INSERT INTO memories_memory ({', '.join(columns)}) {select}", params)
    cursor.execute(
        "INSERT INTO memories_memoryscore (memory_id, workspace_id, retention_score, retrieval_profile) "
        "SELECT id, workspace_id, floor(random() * 10000) / 10000.0, '{}'::jsonb FROM memories_memory "
        "WHERE workspace_id = %s",
        [workspace_id],
    )
    step(f"{count:,} memories")
    for _, sql in indexes:
        cursor.execute(sql)
    step(f"{len(indexes)} indexes of the memory and score tables (the search_vector GIN index among them)")
    kinds = ", ".join(f"'{k}'" for k in EDGE_TYPES)
    cursor.execute(
        "WITH pairs AS MATERIALIZED (SELECT 1 + floor(random() * %s)::bigint AS a, "
        "1 + floor(random() * %s)::bigint AS b, "
        f"(ARRAY[{kinds}])[1 + floor(random() * {len(EDGE_TYPES)})::int] AS t FROM generate_series(1, %s)) "
        "INSERT INTO memories_edge (workspace_id, source_id, target_id, edge_type, weight, co_retrieval_count, "
        "created_at, metadata) "
        "SELECT %s, md5(%s || ':' || a)::uuid, md5(%s || ':' || b)::uuid, t, 0.2 + floor(random() * 180) / 100.0, "
        "0, %s, '{}'::jsonb FROM pairs WHERE a != b ON CONFLICT DO NOTHING",
        [count, count, count, workspace_id, str(workspace_id), str(workspace_id), end],
    )
    step("edges")


# -- scenarios -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    page: str  # a key of TARGETS_MS
    urls: list[str]


@dataclass
class Context:
    rng: random.Random
    requests: int
    ws: str = "bench"
    samples: dict[str, Any] = field(default_factory=dict)


def _random_cursor_urls(ctx: Context, ordering: str, column: str) -> list[str]:
    """Keyset cursors at random depths: any page must cost what the first one does."""
    from memories.models import Memory
    from memories.selectors import encode_cursor

    total = Memory.objects.filter(workspace__slug=ctx.ws).count()
    urls = []
    for _ in range(ctx.requests):
        offset = ctx.rng.randrange(total)
        row = (
            Memory.objects.filter(workspace__slug=ctx.ws)
            .order_by("id")
            .values_list(column, "id")[offset : offset + 1]
            .get()
        )
        if row[0] is None:
            continue
        urls.append(f"/w/{ctx.ws}/?ordering={ordering}&status=any&cursor={encode_cursor(ordering, row[0], row[1])}")
    return urls


def list_scenarios(ctx: Context) -> list[Scenario]:
    base = f"/w/{ctx.ws}/"
    n = ctx.requests
    words = ctx.rng.sample(WORDS, 12)
    return [
        Scenario("list: newest first", "list", [base] * n),
        Scenario("list: most active now", "list", [base + "?ordering=-activation"] * n),
        Scenario("list: lowest retention", "list", [base + "?ordering=retention"] * n),
        Scenario("list: recently accessed", "list", [base + "?ordering=-accessed"] * n),
        Scenario("list: deep page (random cursor)", "list", _random_cursor_urls(ctx, "-created", "created_at")),
        Scenario("list: type=decision, active now", "list", [base + "?type=decision&ordering=-activation"] * n),
        Scenario("list: archived", "list", [base + "?status=archived"] * n),
        Scenario("list: pinned", "list", [base + "?pinned=true"] * n),
        Scenario(
            "list: one month",
            "list",
            [base + "?created_after=2025-03-01&created_before=2025-03-31&ordering=created"] * n,
        ),
        # A search lists best matches first by default; the date orders filter and walk an index instead.
        Scenario("list: full-text search", "list", [base + f"?q={words[i % len(words)]}" for i in range(n)]),
        Scenario(
            "list: search, newest first",
            "list",
            [base + f"?q={words[i % len(words)]}&ordering=-created" for i in range(n)],
        ),
        Scenario(
            "list: search three words",
            "list",
            [base + f"?q={words[i % 12]}+{words[(i + 3) % 12]}+{words[(i + 7) % 12]}" for i in range(n)],
        ),
        Scenario(
            "list: search two words + type",
            "list",
            [base + f"?q={words[i % 12]}+{words[(i + 5) % 12]}&type=fact" for i in range(n)],
        ),
    ]


def detail_scenarios(ctx: Context) -> list[Scenario]:
    from memories.models import Memory

    with_history = ctx.samples["detail_ids"]
    # Random memories (two edges on average) and memories with 20 records and 30 retrievals each.
    memories = Memory.objects.filter(workspace__slug=ctx.ws).order_by("id").values_list("id", flat=True)
    total = memories.count()
    any_ids = [memories[ctx.rng.randrange(total)] for _ in range(ctx.requests)]
    return [
        Scenario("detail: random memory", "detail", [f"/w/{ctx.ws}/memories/{m}/" for m in any_ids]),
        Scenario(
            "detail: with history and retrievals",
            "detail",
            [f"/w/{ctx.ws}/memories/{uuid.UUID(with_history[i % len(with_history)])}/" for i in range(ctx.requests)],
        ),
        Scenario(
            "detail: graph.json",
            "detail",
            [f"/w/{ctx.ws}/memories/{m}/graph.json" for m in any_ids[: ctx.requests]],
        ),
    ]


# The inspector (and other pages) add their builders here.
SCENARIO_BUILDERS: list[Callable[[Context], list[Scenario]]] = [list_scenarios, detail_scenarios]


# -- measurement -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    scenario: Scenario
    times_ms: list[float]  # wall clock: what a visitor waits for
    cpu_ms: list[float]  # this process's CPU time: the same request on an idle machine
    db_cpu_ms: float | None = None  # PostgreSQL: the server backend's CPU per request (mean); None on SQLite

    @property
    def p50(self) -> float:
        return percentile(self.times_ms, 50)

    @property
    def p95(self) -> float:
        return percentile(self.times_ms, 95)

    @property
    def cpu_p50(self) -> float:
        return percentile(self.cpu_ms, 50)

    @property
    def cpu_p95(self) -> float:
        return percentile(self.cpu_ms, 95)


_TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")


def _backend_cpu_ms() -> float | None:
    """CPU time (user + system) the PostgreSQL backend serving this process's connection has used so far.

    Read from /proc/<pid>/stat (the server runs on this machine): in clock ticks (10 ms), so it is only
    meaningful summed over many requests. None on SQLite, whose work is in this process's CPU time already.
    """
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * _TICK_MS  # utime, stime (fields 14 and 15 of stat)


def measure(client: Any, scenario: Scenario, warmup: int = 3) -> Result:
    for url in scenario.urls[:warmup]:
        client.get(url)
    times, cpu = [], []
    db_started = _backend_cpu_ms()
    for url in scenario.urls:
        started, started_cpu = time.perf_counter(), time.process_time()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
        if response.status_code != 200:
            raise RuntimeError(f"{url} answered {response.status_code}")
    db_ended = _backend_cpu_ms()
    # The connection is kept across requests (CONN_MAX_AGE); had it been replaced, the figure would be wrong.
    db_cpu = None if db_started is None or db_ended is None or db_ended < db_started else db_ended - db_started
    return Result(scenario, times, cpu, None if db_cpu is None else db_cpu / max(1, len(scenario.urls)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=100, help="requests per scenario")
    parser.add_argument("--rebuild", action="store_true", help="regenerate the cached database")
    parser.add_argument("--only", default="", help="run scenarios whose name contains this text")
    parser.add_argument("--skip", default="", help="leave out scenarios whose name contains this text")
    add_database_argument(parser)
    args = parser.parse_args()

    path = _cache_path(args.memories)
    fresh = args.rebuild or not _is_complete(path, args.database)
    db = django_setup(path.name, fresh=fresh, database=args.database)
    where = str(path) if db.path is not None else f"the PostgreSQL database {db.name}"
    if fresh:
        print(f"generating {args.memories:,} memories into {where} (cached for later runs)", flush=True)
        generate(args.memories)
    else:
        print(f"using cached {where}", flush=True)

    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    with connection.cursor() as cursor:
        cursor.execute("SELECT value FROM bench_meta WHERE key = 'detail_ids'")
        detail_ids = cursor.fetchone()[0].split(",")
    client = Client()
    client.force_login(get_user_model().objects.get(username="bench"))
    ctx = Context(rng=random.Random(11), requests=args.requests, samples={"detail_ids": detail_ids})
    scenarios = [
        s
        for build in SCENARIO_BUILDERS
        for s in build(ctx)
        if args.only in s.name and not (args.skip and args.skip in s.name)
    ]

    results = []
    print(
        f"\ndatabase {db.label}; load average {' '.join(f'{v:.1f}' for v in os.getloadavg())} on {os.cpu_count()} CPUs"
    )
    print(
        f"{'scenario':<42} {'n':>5} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'cpu p50':>8} {'cpu p95':>8} "
        f"{'db CPU':>8}"
    )
    for scenario in scenarios:
        result = measure(client, scenario)
        results.append(result)
        db_cpu = "-" if result.db_cpu_ms is None else f"{result.db_cpu_ms:.1f}"
        print(
            f"{scenario.name:<42} {len(result.times_ms):>5} {result.p50:>8.1f} {result.p95:>8.1f} "
            f"{max(result.times_ms):>8.1f} {result.cpu_p50:>8.1f} {result.cpu_p95:>8.1f} {db_cpu:>8}",
            flush=True,
        )
    failed = False
    print()
    for page, target in TARGETS_MS.items():
        mine = [r for r in results if r.scenario.page == page]
        if not mine:
            continue
        p95 = percentile([t for r in mine for t in r.times_ms], 95)
        cpu_p95 = percentile([t for r in mine for t in r.cpu_ms], 95)
        worst = max(mine, key=lambda r: r.p95)
        ok = p95 <= target
        failed |= not ok
        print(
            f"{page} page on {args.memories:,} memories ({db.label}): p95 {p95:.1f} ms wall, {cpu_p95:.1f} ms CPU "
            f"over {sum(len(r.times_ms) for r in mine)} requests (target <= {target:.0f} ms: "
            f"{'ok' if ok else 'MISSED'}); slowest scenario '{worst.scenario.name}' p95 {worst.p95:.1f} ms"
        )
    load = os.getloadavg()
    print(f"load average after measuring: {' '.join(f'{v:.1f}' for v in load)} on {os.cpu_count()} CPUs")
    if load[0] > (os.cpu_count() or 1):
        print("note: wall times include waiting for a CPU; the CPU columns are what the requests cost")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
