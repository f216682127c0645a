"""Generate the surfacing benchmark workspace: 100k memories and 1M edges, by bulk inserts (SQLite or PostgreSQL).

Text: a Zipf-distributed vocabulary of 6,000 generated words, so posting lists look like natural
language (a few very common terms, a long tail), plus topical clusters of 50 memories sharing three
topic words, so lexical queries find a cluster and the graph joins it. Memories span the last year,
with 2% written in the last day (freshness). Edges, about 1M unique triples:

- 55% inside a cluster (RELATED, CO_RETRIEVED, DERIVED_FROM): the meaningful neighbourhood;
- 20% between random memories (RELATED, LINKS_TO): long-range noise;
- 20% MENTIONS from memories to 1,000 entity memories with Zipf popularity: hubs of degree 10^3-10^4;
- 5% FOLLOWS in creation order.

The memory rows go through memories.bulk.bulk_insert, the ingestion path's writer; the edges through one
executemany of plain tuples (COPY on PostgreSQL), which is what a bulk import does and ten times faster than
model objects.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

CLUSTER_SIZE = 50
N_ENTITIES = 1_000
VOCABULARY = 6_000
SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ra",
    "te",
    "su",
    "no",
    "pa",
    "vi",
    "de",
    "ro",
    "ba",
    "lu",
    "ti",
    "ne",
    "go",
    "sa",
    "ma",
    "ri",
    "ko",
    "fe",
    "zu",
    "ya",
    "wi",
    "be",
    "da",
    "po",
    "ke",
    "ni",
    "ho",
    "la",
    "mo",
    "ru",
    "se",
    "ta",
    "bi",
    "gu",
    "ve",
    "ci",
]
NAMES = [
    "Dana",
    "Lee",
    "Priya",
    "Omar",
    "Chen",
    "Sofia",
    "Mateo",
    "Aisha",
    "Jonas",
    "Keiko",
    "Ravi",
    "Elena",
    "Tariq",
    "Ingrid",
    "Malik",
    "Nora",
    "Hugo",
    "Zara",
    "Felix",
    "Amara",
]


#: Memories embedded per call while generating (and per progress line).
EMBED_CHUNK = 8192


@dataclass(frozen=True)
class BenchWorkspace:
    slug: str
    memories: int
    edges: int
    topic_words: list[list[str]]
    vocabulary: list[str]


def _vocabulary(rng: random.Random) -> list[str]:
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < VOCABULARY:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def generate(
    *, n_memories: int, n_edges: int, seed: int = 7, slug: str = "bench", embedder: str = ""
) -> BenchWorkspace:
    """Create user `bench`, workspace `slug` and its memories and edges in the configured database.

    Every memory gets its vector of the workspace's embedder (`embedder`, an EMBEDDER spec; "" = the
    site's), computed here in batches, so a benchmark searches a full vector index: a bulk write through the
    service would leave a slow model's vectors to the embed job. With minilm that is ~3 min per 100k."""
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from graph.writes import graph_touch
    from memories import services
    from memories.algorithms.sortkey import activation_sort_key
    from memories.bulk import bulk_insert
    from memories.embedding_service import embedding_text, memories_embed
    from memories.embeddings import embedder_for
    from memories.models import Edge, Memory, MemoryType, Workspace

    started = time.perf_counter()
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    vocabulary = _vocabulary(rng)
    zipf = 1.0 / np.arange(1, VOCABULARY + 1) ** 1.1
    zipf /= zipf.sum()
    n_clusters = max(1, (n_memories - N_ENTITIES) // CLUSTER_SIZE)
    # Topic words come from the middle of the distribution: frequent enough to recur, rare enough to select.
    topic_words = [[vocabulary[int(i)] for i in nrng.integers(300, 3000, size=3)] for _ in range(n_clusters)]

    user = get_user_model().objects.filter(username="bench").first() or get_user_model().objects.create_user("bench")
    Workspace.objects.filter(slug=slug).delete()
    workspace = services.workspace_create(owner=user, slug=slug, name="Surfacing bench")
    if embedder:
        Workspace.objects.filter(pk=workspace.pk).update(embedder=embedder)
        workspace.embedder = embedder
    now = datetime.now(UTC)
    n_plain = n_memories - N_ENTITIES
    filler = nrng.choice(VOCABULARY, size=(n_plain, 24), p=zipf)
    lengths = nrng.integers(10, 25, size=n_plain)
    ages_hours = np.where(nrng.random(n_plain) < 0.02, nrng.random(n_plain) * 24, nrng.random(n_plain) * 24 * 365)
    types = ["episodic", "semantic", "fact", "event", "decision", "observation"]
    texts: list[str] = []
    cluster_of = np.arange(n_plain) // CLUSTER_SIZE % n_clusters
    for i in range(n_plain):
        words = [vocabulary[int(w)] for w in filler[i, : int(lengths[i])]]
        topics = topic_words[int(cluster_of[i])]
        for t in rng.sample(topics, 2):
            words.insert(rng.randrange(len(words)), t)
        if rng.random() < 0.3:
            words.insert(0, rng.choice(NAMES))
        texts.append(" ".join(words).capitalize() + ".")
    entity_texts = [f"{rng.choice(NAMES)} {vocabulary[i]}".title() for i in range(N_ENTITIES)]
    all_texts = texts + entity_texts
    ids = [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(n_memories)]
    rows: list[Memory] = []
    for i, text in enumerate(all_texts):
        is_entity = i >= n_plain
        created = now - timedelta(hours=float(ages_hours[i]) if not is_entity else 24 * 400.0)
        score = float(nrng.uniform(0.05, 0.9))
        rows.append(
            Memory(
                id=ids[i],
                workspace=workspace,
                memory_type=MemoryType.ENTITY if is_entity else types[i % len(types)],
                content=text,
                subject=text.lower() if is_entity else "",
                origin="import:bench",
                activation_score=score,
                activation_last_boost_at=created,
                activation_sort_key=activation_sort_key(score, created, 720.0),
                created_at=created,
                updated_at=created,
            )
        )
    model = embedder_for(workspace)
    vectors = np.zeros((len(rows), model.dim), dtype=np.float32)
    embed_started = time.perf_counter()
    for start in range(0, len(rows), EMBED_CHUNK):
        part = rows[start : start + EMBED_CHUNK]
        vectors[start : start + len(part)] = model.embed([embedding_text(m) for m in part])
        if len(rows) > EMBED_CHUNK:
            done = start + len(part)
            rate = done / max(time.perf_counter() - embed_started, 1e-9)
            print(f"  {model.name} vectors: {done:,}/{len(rows):,} at {rate:,.0f}/s", flush=True)
    with transaction.atomic():
        # The write path of every memory: vectors of the workspace's embedder, named and stamped.
        memories_embed(workspace=workspace, memories=rows, vectors=(model, vectors))
        # The ingestion path's writer (COPY on PostgreSQL): Django's bulk_create took 85 s for 100k there.
        bulk_insert(Memory, rows)
    memories_seconds = time.perf_counter() - started

    # Edges as index pairs, deduplicated on (source, target, type) before the insert.
    edge_started = time.perf_counter()
    n_cluster = int(n_edges * 0.58)
    n_random = int(n_edges * 0.21)
    n_mention = int(n_edges * 0.21)
    c_src = nrng.integers(0, n_plain, size=n_cluster)
    c_dst = (c_src // CLUSTER_SIZE) * CLUSTER_SIZE + nrng.integers(0, CLUSTER_SIZE, size=n_cluster)
    c_dst = np.minimum(c_dst, n_plain - 1)
    c_type = nrng.choice(np.array([0, 1, 2]), size=n_cluster, p=[0.6, 0.25, 0.15])
    r_src = nrng.integers(0, n_plain, size=n_random)
    r_dst = nrng.integers(0, n_plain, size=n_random)
    r_type = nrng.choice(np.array([0, 3]), size=n_random, p=[0.7, 0.3])
    e_zipf = 1.0 / np.arange(1, N_ENTITIES + 1) ** 0.9
    m_src = nrng.integers(0, n_plain, size=n_mention)
    m_dst = n_plain + nrng.choice(N_ENTITIES, size=n_mention, p=e_zipf / e_zipf.sum())
    m_type = np.full(n_mention, 4)
    f_src = np.arange(1, n_plain)
    f_dst = np.arange(0, n_plain - 1)
    f_type = np.full(n_plain - 1, 5)
    src = np.concatenate([c_src, r_src, m_src, f_src])
    dst = np.concatenate([c_dst, r_dst, m_dst, f_dst])
    etype = np.concatenate([c_type, r_type, m_type, f_type])
    keep = src != dst
    src, dst, etype = src[keep], dst[keep], etype[keep]
    key = (src.astype(np.int64) * n_memories + dst) * 8 + etype
    _, first = np.unique(key, return_index=True)
    src, dst, etype = src[first], dst[first], etype[first]
    if src.size > n_edges:
        pick = np.sort(nrng.choice(src.size, size=n_edges, replace=False))
        src, dst, etype = src[pick], dst[pick], etype[pick]
    type_names = ["RELATED", "CO_RETRIEVED", "DERIVED_FROM", "LINKS_TO", "MENTIONS", "FOLLOWS"]
    weights = np.where(nrng.random(src.size) < 0.2, np.round(nrng.uniform(0.2, 3.0, size=src.size), 2), 1.0)
    hex_ids = [m.hex for m in ids]
    created_at = now.isoformat() if connection.vendor != "sqlite" else now.strftime("%Y-%m-%d %H:%M:%S.%f")
    table = Edge._meta.db_table
    sql = (
        f"INSERT INTO {table} (workspace_id, source_id, target_id, edge_type, weight, co_retrieval_count, "
        "created_at, metadata) VALUES (%s, %s, %s, %s, %s, 0, %s, '{}')"
    )
    params = [
        (workspace.pk, hex_ids[s], hex_ids[d], type_names[t], float(w), created_at)
        for s, d, t, w in zip(src.tolist(), dst.tolist(), etype.tolist(), weights.tolist(), strict=True)
    ]
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # COPY: an INSERT per edge took 100 s for 1M edges, COPY a few.
            columns = "workspace_id, source_id, target_id, edge_type, weight, co_retrieval_count, created_at, metadata"
            with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for ws_id, source, target, kind, weight, created in params:
                    copy.write_row((ws_id, source, target, kind, weight, 0, created, "{}"))
        else:
            for start in range(0, len(params), 100_000):
                cursor.executemany(sql, params[start : start + 100_000])
        graph_touch(workspace=workspace)
    edges_seconds = time.perf_counter() - edge_started
    print(
        f"generated workspace {slug!r}: {n_memories:,} memories in {memories_seconds:.1f} s, "
        f"{len(params):,} edges in {edges_seconds:.1f} s"
    )
    return BenchWorkspace(slug, n_memories, len(params), topic_words, vocabulary)
