"""GraphStore over Bolt (``GRAPH_BACKEND=neo4j``): Neo4j 5, or FalkorDB's Bolt listener in the tests.

Graph model: one node per memory that has edges, ``(:Memory {id, ws, g})``, and one relationship per
database edge, ``(a)-[:EDGE {type, w, wk, g}]->(b)``. ``id`` is the memory UUID as 32 lowercase hex
digits, ``ws`` the workspace key (``<namespace><workspace pk>``, a string), ``type`` the edge-type name,
``w`` the weight, ``wk`` the same weight and type packed in one integer (``micro_weight * 64 + type
code``, what the expansion query returns) and ``g`` the time of the last write in epoch milliseconds
(a sync deletes what it did not touch).
The edge type is a property of a single relationship type rather than a relationship type per edge type:
one parameterised MERGE then covers every type (Cypher cannot parameterise relationship types), and
the expansion query reads every type in one pattern. ``(source, target, type)`` is unique, as in SQL.

Neighbourhood (``neighbourhood``): breadth-first frontier expansion, one query per chunk of frontier
ids per hop, each returning per expanded node its ``max_neighbours`` heaviest incident edges (ties: lower
neighbour id) as two flat lists (neighbour ids; packed weight, type and direction). New nodes enter hop
by hop until ``max_nodes`` (rank first when they do not all fit; see ``neighbourhood``), and only
admitted nodes are expanded, so the work is bounded whatever the hubs. Nodes are numbered in UUID
order like the SQL snapshot, so the algorithms' "lower node index wins a tie" picks the same
neighbour on both backends. Every node expanded (hop < ``hops``) brings its full adjacency (up to the
cap), so spreading to depth ``hops`` sees exactly what it sees on the whole graph; PPR runs on the
neighbourhood, an approximation of PPR on the whole graph whenever mass could leave it. Seeds are
always nodes (isolated when they have no edges), as every memory is a node of the SQL snapshot.

A single variable-length-path query (``(s)-[:EDGE*0..h-1]-(a)-[e]-(b)``) saves a round trip per hop
and measured 10-25 % faster at two hops on 10k-edge workspaces (``bench/bench_graphstore_neo4j.py``),
but it expands every node within ``h - 1`` hops before any ``max_nodes`` cut can apply, and where it
cuts (LIMIT) is arbitrary; the frontier expansion is kept for its bounded work.

Cypher is kept to what both Neo4j 5 and FalkorDB 4.16 accept, and to FalkorDB's Bolt quirks:

- Statements run in auto-commit sessions (``session.run``); FalkorDB ignores BEGIN/COMMIT, so every
  write is an idempotent MERGE/SET/DELETE that can be replayed.
- FalkorDB pastes parameters into the query text and crashes when the result passes ~4 KB, so rows
  are sent in chunks sized by ``param_budget`` (query text included); ids are hex, weights travel as
  integer micro-units (text floats are cut to 6 decimals anyway) and strings never contain quotes.
- Results cost ~0.1 ms per record and ~5 us per list element, and a record over 64 KB breaks the
  connection, so results come as one record per node with two flat lists, capped at
  ``max_neighbours`` (at most ``MAX_NEIGHBOURS_LIMIT``) entries, instead of a record per edge.
- FalkorDB frees a Bolt client on GOODBYE without unregistering its socket, which wedges the next
  connection; the driver's GOODBYE is therefore turned into a plain close (harmless on Neo4j), and
  one long-lived driver per process is used with connect/acquire timeouts.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import neo4j
import numpy as np
from neo4j.exceptions import ServiceUnavailable, SessionExpired

from graph.algorithms import build_csr, edge_type_code, edge_type_name
from graph.store import EdgeRef, Subgraph

if TYPE_CHECKING:
    from memories.models import Workspace

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_NEIGHBOURS",
    "DEFAULT_PARAM_BUDGET",
    "Neo4jGraphStore",
    "now_ms",
]

DEFAULT_PARAM_BUDGET = 3_000
"""Bytes of query text plus parameters (as Cypher literals) per statement: FalkorDB's Bolt listener
crashed at about 4,100 in tests here; Neo4j has no such limit (raise it there for fewer round trips)."""

DEFAULT_MAX_NEIGHBOURS = 200
"""Incident edges read per expanded node, heaviest first. Spreading reads the top fan_out (20) per node;
the rest is headroom for edge types spreading skips, for a larger fan-out setting (up to 200) and PPR."""

MAX_NEIGHBOURS_LIMIT = 1_000
"""A node's record is about 45 bytes per edge; FalkorDB breaks the connection on records over 64 KB."""

SWEEP_BATCH = 1_000
"""Relationships or nodes deleted per statement, so a large delete never holds one huge result."""

READ_PAGE = 200
"""Source nodes per page when reading a workspace's edges back (graph_sync --to sql)."""

MICRO = 1_000_000
_TYPE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
_NAMESPACE = re.compile(r"^[A-Za-z0-9_]{0,40}$")

# --- Cypher (portable subset: no elementId, datetime(), named indexes, constraints or SHOW) ----------

INDEX_STATEMENTS = (
    "CREATE INDEX FOR (m:Memory) ON (m.id)",
    "CREATE INDEX FOR (m:Memory) ON (m.ws)",
)

PING = "RETURN 1 AS ok"

EXPAND = """
UNWIND $ids AS x
MATCH (a:Memory {id: x})
WHERE a.ws = $ws
MATCH (a)-[e:EDGE]-(b:Memory)
WHERE b.ws = $ws
WITH a, b, e ORDER BY e.w DESC, b.id
WITH a, collect(b.id)[0..$cap] AS nb,
     collect(e.wk * 2 + CASE WHEN startNode(e) = a THEN 1 ELSE 0 END)[0..$cap] AS wk
RETURN a.id AS a, nb, wk
"""

MERGE_EDGES = """
UNWIND $rows AS r
MERGE (a:Memory {id: r[0], ws: $ws})
MERGE (b:Memory {id: r[1], ws: $ws})
MERGE (a)-[e:EDGE {type: r[2]}]->(b)
SET e.w = r[3] / 1000000.0, e.wk = r[3] * 64 + r[4], e.g = $g, a.g = $g, b.g = $g
"""

DELETE_EDGES = """
UNWIND $rows AS r
MATCH (a:Memory {id: r[0]})-[e:EDGE {type: r[2]}]->(b:Memory {id: r[1]})
WHERE a.ws = $ws AND b.ws = $ws
DELETE e
"""

DELETE_ORPHANS = """
UNWIND $ids AS x
MATCH (m:Memory {id: x})
WHERE m.ws = $ws
OPTIONAL MATCH (m)-[e:EDGE]-()
WITH m, count(e) AS degree
WHERE degree = 0
DELETE m
"""

SWEEP_EDGES = """
MATCH (a:Memory {ws: $ws})-[e:EDGE]->()
WHERE e.g IS NULL OR e.g < $g
WITH e LIMIT $batch
DELETE e
RETURN count(*) AS n
"""

SWEEP_NODES = """
MATCH (m:Memory {ws: $ws})
WHERE m.g IS NULL OR m.g < $g
WITH m LIMIT $batch
DETACH DELETE m
RETURN count(*) AS n
"""

DROP_WORKSPACE = """
MATCH (m:Memory {ws: $ws})
WITH m LIMIT $batch
DETACH DELETE m
RETURN count(*) AS n
"""

WORKSPACE_KEYS = "MATCH (m:Memory) RETURN DISTINCT m.ws AS ws"

COUNTS = """
MATCH (m:Memory {ws: $ws})
OPTIONAL MATCH (m)-[e:EDGE]->()
RETURN count(DISTINCT m) AS nodes, count(e) AS edges
"""

READ_EDGES = """
MATCH (a:Memory)
WHERE a.ws = $ws AND a.id > $after
WITH a ORDER BY a.id LIMIT $page
OPTIONAL MATCH (a)-[e:EDGE]->(b:Memory)
WITH a, collect(b.id) AS t, collect(e.type) AS ty, collect(e.w) AS w
UNWIND range(0, CASE WHEN size(t) = 0 THEN 0 ELSE size(t) - 1 END, $slice) AS off
RETURN a.id AS s, t[off..off + $slice] AS t, ty[off..off + $slice] AS ty, w[off..off + $slice] AS w
"""


# --- helpers --------------------------------------------------------------------------------------


def _silence_goodbye() -> bool:
    """Make the driver close connections without a Bolt GOODBYE message (see the module docstring).

    FalkorDB 4.16 frees the client on GOODBYE but leaves its descriptor in the event loop, so the next
    connection that reuses the descriptor number is never served. Closing the socket without GOODBYE is
    handled correctly by FalkorDB and by Neo4j. Returns False when the driver's internals moved.
    """
    try:
        base = importlib.import_module("neo4j._sync.io._bolt").Bolt
        for name in ("_bolt3", "_bolt4", "_bolt5"):
            importlib.import_module(f"neo4j._sync.io.{name}")
    except (ImportError, AttributeError):
        return False
    patched, stack = False, [base]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if "goodbye" in vars(cls):
            cls.goodbye = _no_goodbye
            patched = True
    return patched


def _no_goodbye(self: object, *args: object, **kwargs: object) -> None:
    return None


def _literal_size(value: object) -> int:
    """Length of ``value`` written as a Cypher literal (how FalkorDB's Bolt listener sends parameters)."""
    if isinstance(value, str):
        return len(value.encode()) + 2
    if isinstance(value, bool) or value is None:
        return 5
    if isinstance(value, int):
        return len(str(value))
    if isinstance(value, float):
        return 24
    if isinstance(value, (list, tuple)):
        return 2 + sum(_literal_size(v) + 2 for v in value)
    raise TypeError(f"unsupported parameter type {type(value).__name__}")


def _chunks(items: Sequence[Any], budget: int) -> Iterator[list[Any]]:
    """Consecutive slices of ``items`` whose literal size stays within ``budget`` (at least one item)."""
    chunk: list[Any] = []
    size = 2
    for item in items:
        cost = _literal_size(item) + 2
        if chunk and size + cost > budget:
            yield chunk
            chunk, size = [], 2
        chunk.append(item)
        size += cost
    if chunk:
        yield chunk


def type_name(edge_type: str) -> str:
    name = edge_type.strip().upper()
    return name if _TYPE_NAME.match(name) else "OTHER"


def micro_weight(weight: float) -> int:
    """Weight as integer micro-units (>= 0, finite): FalkorDB keeps 6 decimals of a text float anyway."""
    if not weight > 0.0 or weight == float("inf"):
        return 0
    return round(weight * MICRO)


def _edge_row(edge: EdgeRef) -> list[Any]:
    name = type_name(edge.edge_type)
    return [edge.source.hex, edge.target.hex, name, micro_weight(edge.weight), edge_type_code(name)]


def _unpack(packed: int) -> tuple[float, int, bool]:
    """(weight, edge-type code, outgoing) from ``(micro_weight * 64 + code) * 2 + outgoing``."""
    return (packed >> 7) / MICRO, (packed >> 1) & 63, bool(packed & 1)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# --- the store ------------------------------------------------------------------------------------


class Neo4jGraphStore:
    """GraphStore over one long-lived Bolt driver (thread-safe; a session per call).

    ``namespace`` prefixes the workspace key, so several databases (test runs) can share one graph
    server without seeing each other's nodes. ``driver`` lets instances share a driver.
    """

    def __init__(
        self,
        uri: str,
        user: str = "",
        password: str = "",
        *,
        namespace: str = "",
        driver: neo4j.Driver | None = None,
        max_neighbours: int = DEFAULT_MAX_NEIGHBOURS,
        param_budget: int = DEFAULT_PARAM_BUDGET,
        timeout: float = 5.0,
    ) -> None:
        if not _NAMESPACE.match(namespace):
            raise ValueError(f"namespace must be letters, digits or _ (at most 40), got {namespace!r}")
        if not 1 <= max_neighbours <= MAX_NEIGHBOURS_LIMIT:
            raise ValueError(f"max_neighbours must be in [1, {MAX_NEIGHBOURS_LIMIT}], got {max_neighbours}")
        self.uri = uri
        self.namespace = namespace
        self.max_neighbours = max_neighbours
        self.param_budget = param_budget
        self.write_failures = 0
        if driver is None:
            if not _silence_goodbye():
                log.warning("could not patch the neo4j driver's GOODBYE; FalkorDB may wedge after a close")
            driver = neo4j.GraphDatabase.driver(
                uri,
                auth=(user, password) if user else None,
                connection_timeout=timeout,
                connection_acquisition_timeout=timeout,
                max_connection_pool_size=16,
            )
        self._driver = driver
        self._indexes_ready = False
        self._index_lock = threading.Lock()

    # -- plumbing --------------------------------------------------------------------------------

    def workspace_key(self, workspace: Workspace | int) -> str:
        pk = workspace if isinstance(workspace, int) else workspace.pk
        return f"{self.namespace}{pk}"

    def _run(self, query: str, **params: Any) -> list[neo4j.Record]:
        """Run one auto-commit statement; reconnect once if the pooled connection died."""
        for attempt in (1, 2):
            try:
                with self._driver.session() as session:
                    return list(session.run(query, params))
            except (ServiceUnavailable, SessionExpired):
                if attempt == 2:
                    raise
                log.warning("Bolt connection lost; retrying once on a new connection")
        raise AssertionError("unreachable")

    def _chunked(self, query: str, key: str, items: Sequence[Any], **params: Any) -> Iterator[list[neo4j.Record]]:
        """Run ``query`` once per chunk of ``items`` (bound to ``$key``) within the parameter budget."""
        fixed = len(query) + sum(_literal_size(v) + len(k) + 4 for k, v in params.items()) + len(key) + 4
        for chunk in _chunks(items, max(self.param_budget - fixed, 64)):
            yield self._run(query, **{key: chunk}, **params)

    def ensure_indexes(self) -> None:
        """Create the anonymous id and ws indexes once per process (an existing one raises: ignored)."""
        if self._indexes_ready:
            return
        with self._index_lock:
            if self._indexes_ready:
                return
            for statement in INDEX_STATEMENTS:
                # "already exists" arrives as an unknown error on FalkorDB.
                with contextlib.suppress(neo4j.exceptions.Neo4jError):
                    self._run(statement)
            self._indexes_ready = True

    @property
    def driver(self) -> neo4j.Driver:
        return self._driver

    def close(self) -> None:
        self._driver.close()

    # -- GraphStore protocol ---------------------------------------------------------------------

    def ping(self) -> None:
        records = self._run(PING)
        if not records or records[0]["ok"] != 1:
            raise ConnectionError(f"unexpected reply from {self.uri}: {records!r}")

    def neighbourhood(
        self, workspace: Workspace, seed_ids: Sequence[uuid.UUID], *, hops: int, max_nodes: int
    ) -> Subgraph:
        """Seeds plus nodes within ``hops``, breadth first, at most ``max_nodes`` (see the module docstring).

        When a hop brings more new nodes than there is room for, they are admitted by rank: every
        expanded node's heaviest neighbour first, then every node's second, and so on (ties: heavier
        edge, then lower id), so one hub cannot take every slot; ``truncated`` is then True. A node with
        more than ``max_neighbours`` edges contributes its heaviest ones only: a fixed bound like
        spreading's fan-out (which reads a prefix of the same order), not a cut at ``max_nodes``, so it
        leaves ``truncated`` alone (a hub of a conversation workspace would otherwise flag every call).
        """
        started = time.perf_counter()
        ws = self.workspace_key(workspace)
        seeds = list(dict.fromkeys(s.hex for s in seed_ids))
        admitted: dict[str, int] = {s: 0 for s in seeds}  # hex id -> hop
        edges: dict[tuple[str, str, int], float] = {}  # (source, target, type code) -> weight
        truncated = False
        frontier = seeds
        cap = self.max_neighbours
        for hop in range(1, max(hops, 0) + 1):
            if not frontier:
                break
            found: dict[str, tuple[int, float]] = {}  # candidate -> (best rank, heaviest edge)
            for records in self._chunked(EXPAND, "ids", frontier, ws=ws, cap=cap):
                for record in records:
                    a = record["a"]
                    rows = zip(record["nb"], record["wk"], strict=True)
                    for rank, (b, packed) in enumerate(rows):
                        w, code, out = _unpack(int(packed or 0))
                        edges[(a, b, code) if out else (b, a, code)] = w
                        if b not in admitted:
                            previous = found.get(b)
                            if previous is None or (rank, -w) < (previous[0], -previous[1]):
                                found[b] = (rank, w)
            room = max(max_nodes - len(admitted), 0)
            order = sorted(found, key=lambda b: (found[b][0], -found[b][1], b))
            if len(order) > room:
                truncated = True
                order = order[:room]
            for b in order:
                admitted[b] = hop
            frontier = order
        return self._subgraph(admitted, edges, truncated, started)

    def _subgraph(
        self, admitted: dict[str, int], edges: dict[tuple[str, str, int], float], truncated: bool, started: float
    ) -> Subgraph:
        # Hex ids of equal length sort like the UUIDs they spell: the SQL snapshot's node order.
        hex_ids = sorted(admitted)
        index_of = {h: i for i, h in enumerate(hex_ids)}
        # Edges enter grouped by type name, the order the SQL snapshot reads them in: parallel edges of
        # equal weight between the same two nodes then sit in the same order in both CSR rows.
        kept = [
            (index_of[s], index_of[t], code, w)
            for (s, t, code), w in sorted(edges.items(), key=lambda item: (edge_type_name(item[0][2]), item[0][:2]))
            if s in index_of and t in index_of
        ]
        src = np.fromiter((k[0] for k in kept), dtype=np.int64, count=len(kept))
        dst = np.fromiter((k[1] for k in kept), dtype=np.int64, count=len(kept))
        types = np.fromiter((k[2] for k in kept), dtype=np.int8, count=len(kept))
        weights = np.fromiter((k[3] for k in kept), dtype=np.float64, count=len(kept))
        csr = build_csr(len(hex_ids), src, dst, np.maximum(np.nan_to_num(weights, nan=0.0, posinf=0.0), 0.0), types)
        ids = [uuid.UUID(hex=h) for h in hex_ids]
        return Subgraph(
            csr,
            ids,
            {mid: i for i, mid in enumerate(ids)},
            truncated=truncated,
            build_seconds=time.perf_counter() - started,
        )

    def edges_added(self, workspace: Workspace, edges: Sequence[EdgeRef]) -> None:
        """Mirror created (or re-weighted) edges; a failure is logged, and graph_sync repairs it."""
        self._write_hook("add", lambda: self.merge_edges(workspace, edges))

    def edges_removed(self, workspace: Workspace, edges: Sequence[EdgeRef]) -> None:
        """Mirror deleted edges, and drop nodes left without any edge."""
        self._write_hook("remove", lambda: self.delete_edges(workspace, edges))

    def _write_hook(self, what: str, write: Callable[[], object]) -> None:
        # The database transaction has committed: raising here would fail a request whose write
        # succeeded, so the mirror logs the miss and counts it instead (graph_sync brings it back).
        try:
            write()
        except Exception:
            self.write_failures += 1
            log.exception("mirroring edge %s to the Bolt graph failed; run graph_sync --to neo4j", what)

    # -- writes ----------------------------------------------------------------------------------

    def merge_edges(self, workspace: Workspace | int, edges: Iterable[EdgeRef], *, mark: int | None = None) -> int:
        """MERGE ``edges`` (nodes created as needed, weight overwritten); return how many were sent."""
        self.ensure_indexes()
        rows = [_edge_row(e) for e in edges]
        for _ in self._chunked(MERGE_EDGES, "rows", rows, ws=self.workspace_key(workspace), g=mark or now_ms()):
            pass
        return len(rows)

    def delete_edges(self, workspace: Workspace | int, edges: Iterable[EdgeRef]) -> None:
        rows = [_edge_row(e)[:3] for e in edges]
        if not rows:
            return
        ws = self.workspace_key(workspace)
        for _ in self._chunked(DELETE_EDGES, "rows", rows, ws=ws):
            pass
        endpoints = sorted({r[0] for r in rows} | {r[1] for r in rows})
        for _ in self._chunked(DELETE_ORPHANS, "ids", endpoints, ws=ws):
            pass

    def sweep(self, workspace: Workspace | int, mark: int) -> tuple[int, int]:
        """Delete the workspace's edges and nodes last written before ``mark``; return (edges, nodes)."""
        ws = self.workspace_key(workspace)
        return self._repeat(SWEEP_EDGES, ws=ws, g=mark), self._repeat(SWEEP_NODES, ws=ws, g=mark)

    def drop_workspace(self, workspace: Workspace | int | str) -> int:
        """DETACH DELETE every node of one workspace (a str is taken as a workspace key as is)."""
        ws = workspace if isinstance(workspace, str) else self.workspace_key(workspace)
        return self._repeat(DROP_WORKSPACE, ws=ws)

    def _repeat(self, query: str, **params: Any) -> int:
        total = 0
        while True:
            records = self._run(query, batch=SWEEP_BATCH, **params)
            n = int(records[0]["n"]) if records else 0
            total += n
            if n < SWEEP_BATCH:
                return total

    # -- reads for maintenance -------------------------------------------------------------------

    def workspace_keys(self) -> list[str]:
        """Workspace keys present in the graph within this store's namespace."""
        keys = [str(r["ws"]) for r in self._run(WORKSPACE_KEYS) if r["ws"] is not None]
        return sorted(k for k in keys if k.startswith(self.namespace) and k[len(self.namespace) :].isdigit())

    def counts(self, workspace: Workspace | int) -> tuple[int, int]:
        """(nodes, edges) of a workspace in the graph."""
        records = self._run(COUNTS, ws=self.workspace_key(workspace))
        return (int(records[0]["nodes"]), int(records[0]["edges"])) if records else (0, 0)

    def read_edges(self, workspace: Workspace | int) -> dict[tuple[uuid.UUID, uuid.UUID, str], float]:
        """Every edge of a workspace in the graph: (source, target, type) -> weight."""
        ws = self.workspace_key(workspace)
        found: dict[tuple[uuid.UUID, uuid.UUID, str], float] = {}
        after = ""
        while True:
            records = self._run(READ_EDGES, ws=ws, after=after, page=READ_PAGE, slice=self.max_neighbours)
            if not records:
                return found
            sources = {str(r["s"]) for r in records}
            for r in records:
                source = uuid.UUID(hex=str(r["s"]))
                for target, edge_type, weight in zip(r["t"], r["ty"], r["w"], strict=True):
                    found[(source, uuid.UUID(hex=str(target)), str(edge_type))] = float(weight or 0.0)
            if len(sources) < READ_PAGE:
                return found
            after = max(sources)


# --- sync between the database and the graph --------------------------------------------------------
