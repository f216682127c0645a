"""Graph access: the GraphStore protocol and its SQL implementation.

Surfacing walks the memory graph (spreading activation, Personalized PageRank) through a
``GraphStore``. A store hands back a ``Subgraph``: a CSR matrix over dense node indices plus the map
between those indices and memory ids. Two implementations exist:

- ``SqlGraphStore`` (``GRAPH_BACKEND=sql``, the default): edges live in the database; each process keeps
  one CSR snapshot per workspace in memory (the ``GRAPH_SNAPSHOT_WORKSPACES`` most recently used). When
  ``Workspace.graph_generation`` (bumped by every edge write) moves, the snapshot is *extended*: only
  edges with an id above the largest one it holds are read and merged in (``merge_csr``), which costs
  tens of milliseconds instead of seconds for a 1M-edge workspace. It is rebuilt from scratch only when
  ``Workspace.graph_rewrites`` moved too (an edge was deleted, re-weighted or re-typed, which appending
  cannot express), when the workspace was recreated, or when a memory that has edges disappeared.
  ``neighbourhood`` returns the whole snapshot: the algorithms that read it are local (bounded BFS,
  forward push), so slicing out a neighbourhood per query would cost more than it saves.

  Appending by id is sound because edge ids of one workspace are handed out in commit order: writers
  call ``graph.writes.graph_touch`` *before* inserting edges, and its UPDATE of the workspace row
  holds that row until commit, so a later writer of the workspace takes its ids after an earlier one
  committed (SQLite serialises writers anyway). The reader reads the counters first, then the edges,
  then the memories: anything committed in between is either included or announced by a counter the
  next call sees, and an edge never arrives before its memories.
- ``Neo4jGraphStore`` (``GRAPH_BACKEND=neo4j``, in ``graph.bolt``): fetches a bounded
  neighbourhood over Bolt per query and mirrors edge writes through ``edges_added`` / ``edges_removed``.
"""

from __future__ import annotations

import bisect
import importlib
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, cast, overload

import numpy as np
import numpy.typing as npt
from django.apps import apps
from django.conf import settings
from django.db import connection

from core.sql import as_text, group_concat, unindexed, uuid_hex_sql
from graph.algorithms import CSRGraph, build_csr, edge_type_code, merge_csr

if TYPE_CHECKING:
    from memories.models import Workspace

log = logging.getLogger(__name__)


__all__ = [
    "EdgeRef",
    "GraphStore",
    "SqlGraphStore",
    "Subgraph",
    "graph_store",
    "set_graph_store",
]

MAX_CACHED_WORKSPACES = 16
"""Default number of snapshots kept per process (least recently used evicted; the setting
``GRAPH_SNAPSHOT_WORKSPACES`` overrides it): about 30 MB per 1M-edge workspace."""


def table(model: str) -> str:
    """The database table of a model of the memories app (read through the app registry: no import)."""
    return str(apps.get_model("memories", model)._meta.db_table)


@dataclass(frozen=True, eq=False)
class Subgraph:
    """A graph over dense node indices: ``ids[i]`` is the memory of node ``i``; ``index`` the inverse.

    ``ids`` and ``index`` are read-only views (the SQL store decodes them on access from the sorted id
    halves instead of building 100k UUID objects and a dict per snapshot; a Bolt store passes a list
    and a dict). ``generation`` is the workspace's ``graph_generation`` the data was read at (-1 when
    unknown).
    ``truncated`` is True when a store cut the neighbourhood at ``max_nodes``. ``build_seconds`` is the
    wall time of the read and build; ``incremental`` says it extended an earlier snapshot.
    """

    csr: CSRGraph
    ids: Sequence[uuid.UUID]
    index: Mapping[uuid.UUID, int]
    generation: int = -1
    truncated: bool = False
    build_seconds: float = 0.0
    incremental: bool = False

    def ids_of(self, nodes: npt.ArrayLike) -> list[uuid.UUID]:
        """Memory ids of node indices, in the given order (decoded in bulk for the SQL store's views)."""
        positions = np.asarray(nodes, dtype=np.int64).ravel()
        ids = self.ids
        if isinstance(ids, _NodeIds):
            return ids.many(positions)
        return [ids[i] for i in positions.tolist()]

    def nodes_of(self, memory_ids: Sequence[uuid.UUID]) -> list[int]:
        """Node indices of those memories that are in the graph, in the given order."""
        index = self.index
        if isinstance(index, _NodeIndex):
            found = index.positions(memory_ids)
            nodes: list[int] = found[found >= 0].tolist()
            return nodes
        return [index[m] for m in memory_ids if m in index]


@dataclass(frozen=True)
class EdgeRef:
    """An edge as the write hooks see it (memory ids, not database rows)."""

    source: uuid.UUID
    target: uuid.UUID
    edge_type: str
    weight: float = 1.0


class GraphStore(Protocol):
    def neighbourhood(
        self, workspace: Workspace, seed_ids: Sequence[uuid.UUID], *, hops: int, max_nodes: int
    ) -> Subgraph:
        """A subgraph holding at least the nodes within ``hops`` of the seeds (up to ``max_nodes``)."""
        ...

    def ping(self) -> None:
        """Raise when the backend does not answer (used by /healthz)."""
        ...

    def edges_added(self, workspace: Workspace, edges: Sequence[EdgeRef]) -> None:
        """Called after a transaction that created edges committed."""
        ...

    def edges_removed(self, workspace: Workspace, edges: Sequence[EdgeRef]) -> None:
        """Called after a transaction that deleted edges committed."""
        ...


def _empty_subgraph(generation: int) -> Subgraph:
    empty = np.empty(0, dtype=np.int64)
    return Subgraph(build_csr(0, empty, empty, np.empty(0), empty.astype(np.int8)), [], {}, generation)


def _hex_keys(hex_text: str | None) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """Split concatenated 32-digit hex UUIDs into their high and low 64-bit halves (one C-level pass)."""
    raw = np.frombuffer(bytes.fromhex(hex_text or ""), dtype=">u8").reshape(-1, 2)
    return raw[:, 0].astype(np.uint64), raw[:, 1].astype(np.uint64)


class _NodeKeys:
    """Memory ids of a workspace sorted by (high, low) half; a node's index is its position."""

    def __init__(self, hex_text: str | None) -> None:
        hi, lo = _hex_keys(hex_text)
        # Sorting by the high half alone is 4x cheaper than a two-key lexsort and nearly always enough;
        # equal high halves (odds about n^2 / 2^65) take the lexsort.
        order = np.argsort(hi)
        if hi.shape[0] > 1 and bool(np.any(hi[order][1:] == hi[order][:-1])):
            order = np.lexsort((lo, hi))
        self.hi, self.lo = hi[order], lo[order]
        self._fallback: dict[tuple[int, int], int] | None = None
        self._hi_list: list[int] | None = None
        self._lo_list: list[int] | None = None

    def __len__(self) -> int:
        return int(self.hi.shape[0])

    def same_as(self, other: _NodeKeys) -> bool:
        return len(self) == len(other) and bool(np.array_equal(self.hi, other.hi) and np.array_equal(self.lo, other.lo))

    def lookup(self, hex_text: str | None) -> npt.NDArray[np.int64]:
        """Node index of every id in ``hex_text``, -1 for ids that are not nodes."""
        return self.lookup_halves(*_hex_keys(hex_text))

    def lookup_halves(self, hi: npt.NDArray[np.uint64], lo: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        """Node index of every id given by its halves, -1 for ids that are not nodes.

        A binary search on the high half finds nearly every id; the low half confirms it. An id whose
        high half collides with another's (odds about n^2 / 2^65) is resolved exactly through a dict.
        """
        n = len(self)
        if n == 0:
            return np.full(hi.shape[0], -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.hi, hi), n - 1).astype(np.int64)
        found = (self.hi[pos] == hi) & (self.lo[pos] == lo)
        if not found.all():
            if self._fallback is None:
                self._fallback = {(int(h), int(lw)): i for i, (h, lw) in enumerate(zip(self.hi, self.lo, strict=True))}
            for i in np.flatnonzero(~found).tolist():
                pos[i] = self._fallback.get((int(hi[i]), int(lo[i])), -1)
        return pos

    def uuids(self) -> list[uuid.UUID]:
        return [uuid.UUID(int=(h << 64) | lw) for h, lw in zip(self.hi.tolist(), self.lo.tolist(), strict=True)]

    def uuid_at(self, i: int) -> uuid.UUID:
        return uuid.UUID(int=(int(self.hi[i]) << 64) | int(self.lo[i]))

    def position(self, memory_id: object) -> int:
        """Node index of one id (-1 when it is not a node): a binary search over Python ints, about a
        microsecond (numpy's per-call overhead on a scalar would be several)."""
        if not isinstance(memory_id, uuid.UUID):
            return -1
        if self._hi_list is None:
            self._hi_list, self._lo_list = self.hi.tolist(), self.lo.tolist()
        hi_list, lo_list = self._hi_list, self._lo_list
        assert lo_list is not None
        value = memory_id.int
        hi, lo = value >> 64, value & 0xFFFF_FFFF_FFFF_FFFF
        pos = bisect.bisect_left(hi_list, hi)
        while pos < len(hi_list) and hi_list[pos] == hi:
            # Equal high halves (odds about n^2 / 2^65) sit next to each other, sorted by the low half.
            if lo_list[pos] == lo:
                return pos
            pos += 1
        return -1

    def positions(self, memory_ids: Sequence[uuid.UUID]) -> npt.NDArray[np.int64]:
        """``position`` of many ids at once (one vectorised search)."""
        values = [m.int if isinstance(m, uuid.UUID) else -1 for m in memory_ids]
        valid = np.fromiter((v >= 0 for v in values), dtype=np.bool_, count=len(values))
        hi = np.fromiter((v >> 64 if v >= 0 else 0 for v in values), dtype=np.uint64, count=len(values))
        lo = np.fromiter(
            (v & 0xFFFF_FFFF_FFFF_FFFF if v >= 0 else 0 for v in values), dtype=np.uint64, count=len(values)
        )
        found = self.lookup_halves(hi, lo)
        found[~valid] = -1
        return found


class _NodeIds(Sequence[uuid.UUID]):
    """``Subgraph.ids`` of the SQL store: node ``i``'s memory id, decoded when asked for."""

    __slots__ = ("_nodes",)

    def __init__(self, nodes: _NodeKeys) -> None:
        self._nodes = nodes

    def __len__(self) -> int:
        return len(self._nodes)

    @overload
    def __getitem__(self, i: int) -> uuid.UUID: ...

    @overload
    def __getitem__(self, i: slice) -> list[uuid.UUID]: ...

    def __getitem__(self, i: int | slice) -> uuid.UUID | list[uuid.UUID]:
        n = len(self._nodes)
        if isinstance(i, slice):
            return [self._nodes.uuid_at(k) for k in range(*i.indices(n))]
        k = int(i) + n if int(i) < 0 else int(i)
        if not 0 <= k < n:
            raise IndexError(f"node {i} is not in [0, {n})")
        return self._nodes.uuid_at(k)

    def __iter__(self) -> Iterator[uuid.UUID]:
        return iter(self._nodes.uuids())

    def many(self, positions: npt.NDArray[np.int64]) -> list[uuid.UUID]:
        """The ids at ``positions`` (one gather of the halves, then one UUID per id)."""
        hi, lo = self._nodes.hi[positions].tolist(), self._nodes.lo[positions].tolist()
        return [uuid.UUID(int=(h << 64) | lw) for h, lw in zip(hi, lo, strict=True)]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _NodeIds):
            return self._nodes.same_as(other._nodes)
        return isinstance(other, Sequence) and not isinstance(other, str) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


class _NodeIndex(Mapping[uuid.UUID, int]):
    """``Subgraph.index`` of the SQL store: memory id -> node index by binary search, no dict."""

    __slots__ = ("_nodes",)

    def __init__(self, nodes: _NodeKeys) -> None:
        self._nodes = nodes

    def __getitem__(self, memory_id: uuid.UUID) -> int:
        pos = self._nodes.position(memory_id)
        if pos < 0:
            raise KeyError(memory_id)
        return pos

    def __contains__(self, memory_id: object) -> bool:
        return self._nodes.position(memory_id) >= 0

    def get(self, memory_id: uuid.UUID, default: int | None = None) -> int | None:  # type: ignore[override]
        pos = self._nodes.position(memory_id)
        return default if pos < 0 else pos

    def positions(self, memory_ids: Sequence[uuid.UUID]) -> npt.NDArray[np.int64]:
        """Node index of every id, -1 for those that are not nodes."""
        return self._nodes.positions(memory_ids)

    def __iter__(self) -> Iterator[uuid.UUID]:
        return iter(self._nodes.uuids())

    def __len__(self) -> int:
        return len(self._nodes)


CO_RETRIEVED_FULL_COUNT = 10
"""Co-retrievals at which a CO_RETRIEVED edge counts with its full weight in the snapshot."""

_EdgeGroups = list[tuple[str, str | None, str | None, str | None, int | None]]


def _read_edges(workspace_id: int, after_id: int | None) -> tuple[_EdgeGroups, int | None]:
    """Edges of the workspace (only those with ``id > after_id`` when given), one row per edge type with
    ids and weights concatenated into strings, and the largest edge id read (None when none).

    The incremental read walks the primary key from ``after_id``: on SQLite the unary plus keeps the
    planner off the (workspace, edge_type) index, which would visit every edge of the workspace.
    """
    # A CO_RETRIEVED edge weighs its co-retrieval count (CO_RETRIEVED_FULL_COUNT and above: its own weight):
    # a pair retrieved together once is a weak path for spreading, a pair seen together often a strong one.
    weight = (
        f"CASE WHEN edge_type = 'CO_RETRIEVED' AND co_retrieval_count > 0 AND co_retrieval_count < "
        f"{CO_RETRIEVED_FULL_COUNT} THEN weight * co_retrieval_count / {float(CO_RETRIEVED_FULL_COUNT)} ELSE weight END"
    )
    params: list[int] = [workspace_id]
    where = "workspace_id = %s"
    if after_id is not None:
        where = f"id > %s AND {unindexed('workspace_id')} = %s"
        params = [after_id, workspace_id]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT edge_type, {group_concat(uuid_hex_sql('source_id'))}, "
            f"{group_concat(uuid_hex_sql('target_id'))}, {group_concat(as_text(weight), ',')}, max(id) "
            f"FROM {table('Edge')} WHERE {where} GROUP BY edge_type",
            params,
        )
        groups = [(str(t), src, dst, w, None if top is None else int(top)) for t, src, dst, w, top in cursor.fetchall()]
    top_ids = [g[4] for g in groups if g[4] is not None]
    return groups, max(top_ids) if top_ids else None


def _read_nodes(workspace_id: int) -> _NodeKeys:
    """Every memory id of the workspace, sorted (one covering-index read, ~30 ms for 100k memories)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {group_concat(uuid_hex_sql('id'))} FROM {table('Memory')} WHERE workspace_id = %s",
            [workspace_id],
        )
        row = cursor.fetchone()
    return _NodeKeys(row[0] if row else None)


@dataclass(frozen=True)
class _Edges:
    src: npt.NDArray[np.int64]
    dst: npt.NDArray[np.int64]
    weights: npt.NDArray[np.float64]
    types: npt.NDArray[np.int8]
    dropped: int


def _decode(groups: _EdgeGroups, nodes: _NodeKeys) -> _Edges:
    """Map the concatenated endpoints to node indices; edges with an endpoint that is not a node of
    ``nodes`` are dropped and counted."""
    src_parts: list[npt.NDArray[np.int64]] = []
    dst_parts: list[npt.NDArray[np.int64]] = []
    type_parts: list[npt.NDArray[np.int8]] = []
    weight_parts: list[npt.NDArray[np.float64]] = []
    dropped = 0
    for edge_type, sources, targets, weights, _ in groups:
        src, dst = nodes.lookup(sources), nodes.lookup(targets)
        w = np.fromstring(weights or "", sep=",", dtype=np.float64) if weights else np.empty(0)
        # Endpoints outside the workspace cannot happen through the services; drop rather than misindex.
        keep = (src >= 0) & (dst >= 0)
        dropped += int(keep.shape[0] - keep.sum())
        src_parts.append(src[keep])
        dst_parts.append(dst[keep])
        weight_parts.append(w[keep])
        type_parts.append(np.full(int(keep.sum()), edge_type_code(edge_type), dtype=np.int8))
    weights_all = np.concatenate(weight_parts) if weight_parts else np.empty(0)
    return _Edges(
        src=np.concatenate(src_parts) if src_parts else np.empty(0, np.int64),
        dst=np.concatenate(dst_parts) if dst_parts else np.empty(0, np.int64),
        weights=np.maximum(np.nan_to_num(weights_all, nan=0.0, posinf=0.0), 0.0),
        types=np.concatenate(type_parts) if type_parts else np.empty(0, np.int8),
        dropped=dropped,
    )


@dataclass(frozen=True)
class _Version:
    """What the workspace row says about its graph: read once per call, before any edge."""

    generation: int
    rewrites: int
    created_at: object


@dataclass(frozen=True, eq=False)
class _Snapshot:
    """A cached snapshot with what extending it needs.

    ``max_edge_id`` is the largest edge id it holds (0 for none); None when an edge had to be dropped
    (an endpoint was not a memory when read), so the next change rebuilds instead of extending.
    """

    version: _Version
    subgraph: Subgraph
    nodes: _NodeKeys
    max_edge_id: int | None

    def extendable_to(self, version: _Version) -> bool:
        mine = self.version
        return (
            self.max_edge_id is not None
            and mine.created_at == version.created_at
            and mine.rewrites == version.rewrites
            and version.generation > mine.generation
        )


def _build(workspace_id: int, version: _Version) -> _Snapshot:
    """A snapshot from scratch: every memory of the workspace is a node (isolated ones have empty
    rows), every edge an entry, in three queries (edges, then memories: see the module docstring).

    The database concatenates ids and weights into one string per edge type, so Python handles a few
    strings instead of a million row tuples; ``bytes.fromhex`` and a binary search over the sorted 64-bit
    id halves then map endpoints to node indices without creating a UUID object per edge. Measured on
    1M edges (SQLite): about 2 s of CPU for the query (1.2 s of it is SQLite visiting the rows) and 1 s
    for decoding and the CSR build, against 12 s for a row-by-row fetch and dict mapping.
    """
    started = time.perf_counter()
    groups, max_id = _read_edges(workspace_id, None)
    nodes = _read_nodes(workspace_id)
    if len(nodes) == 0:
        empty = _empty_subgraph(version.generation)
        return _Snapshot(version, empty, nodes, max_id or 0)
    edges = _decode(groups, nodes)
    csr = build_csr(len(nodes), edges.src, edges.dst, edges.weights, edges.types)
    subgraph = Subgraph(
        csr, _NodeIds(nodes), _NodeIndex(nodes), version.generation, build_seconds=time.perf_counter() - started
    )
    return _Snapshot(version, subgraph, nodes, None if edges.dropped else (max_id or 0))


def _extend(old: _Snapshot, workspace_id: int, version: _Version) -> _Snapshot | None:
    """``old`` plus the edges created since it was read and the memories created since (new nodes);
    None when that cannot equal a rebuild (a memory with edges is gone), so the caller rebuilds.

    Nodes keep their sorted order, so old node indices map to new ones monotonically and
    ``merge_csr`` places only the new edges. Cost for 1M edges and 100k memories: the memory-id read
    (~30 ms) and the merge (~20-50 ms), against ~3 s for a rebuild.
    """
    started = time.perf_counter()
    after = old.max_edge_id
    if after is None:
        return None
    groups, max_id = _read_edges(workspace_id, after)
    nodes = _read_nodes(workspace_id)
    prev = old.subgraph
    if nodes.same_as(old.nodes):
        node_map = np.arange(len(nodes), dtype=np.int64)
        nodes = old.nodes
    else:
        node_map = nodes.lookup_halves(old.nodes.hi, old.nodes.lo)
        gone = node_map < 0
        if gone.any() and bool(np.any((prev.csr.out_degree() + prev.csr.in_degree())[gone] > 0)):
            return None
    edges = _decode(groups, nodes)
    csr = merge_csr(prev.csr, node_map, len(nodes), edges.src, edges.dst, edges.weights, edges.types)
    subgraph = Subgraph(
        csr,
        _NodeIds(nodes),
        _NodeIndex(nodes),
        version.generation,
        build_seconds=time.perf_counter() - started,
        incremental=True,
    )
    newest = after if max_id is None else max(max_id, after)
    return _Snapshot(version, subgraph, nodes, None if edges.dropped else newest)


def load_snapshot(workspace_id: int, generation: int) -> Subgraph:
    """A workspace's CSR snapshot built from scratch (see ``_build``), labelled with ``generation``."""
    return _build(workspace_id, _Version(generation, 0, None)).subgraph


@dataclass
class _Slot:
    """One workspace's cache entry. ``snapshot`` is replaced as a whole (one reference assignment), so a
    reader without the lock sees either the old or the new snapshot, never a mix; ``lock`` is held by
    the one thread building for this workspace."""

    snapshot: _Snapshot | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def _snapshot_cache_size() -> int:
    return int(getattr(settings, "GRAPH_SNAPSHOT_WORKSPACES", MAX_CACHED_WORKSPACES))


class SqlGraphStore:
    """Per-workspace CSR snapshots kept in process memory, extended or rebuilt when the workspace's graph
    counters move (see the module docstring).

    Validity costs one indexed read per call (``graph_generation``, ``graph_rewrites`` and
    ``created_at``; the creation time tells a recreated workspace that reused a row id from its
    predecessor). One thread builds a stale snapshot while the others asking for that workspace wait
    for it and then take it (no second build); other workspaces are not blocked. At most
    ``max_workspaces`` snapshots are kept, least recently used evicted; a slot whose snapshot is being
    built is never evicted, so its waiters cannot start a second build in a fresh slot.
    """

    def __init__(self, max_workspaces: int | None = None) -> None:
        self._max = max(1, max_workspaces if max_workspaces is not None else _snapshot_cache_size())
        self._slots: OrderedDict[int, _Slot] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def max_workspaces(self) -> int:
        return self._max

    def cached_workspaces(self) -> list[int]:
        """Workspace ids with a slot, least recently used first."""
        with self._lock:
            return list(self._slots)

    def _slot(self, workspace_id: int) -> _Slot:
        with self._lock:
            slot = self._slots.get(workspace_id)
            if slot is None:
                slot = self._slots[workspace_id] = _Slot()
            self._slots.move_to_end(workspace_id)
            excess = len(self._slots) - self._max
            if excess > 0:
                victims = [wid for wid, s in self._slots.items() if wid != workspace_id and not s.lock.locked()][
                    :excess
                ]
                for wid in victims:
                    del self._slots[wid]
            return slot

    def full_snapshot(self, workspace: Workspace) -> Subgraph:
        """The whole workspace graph, current as of the workspace's graph counters now."""
        version = self._version(workspace)
        if version is None:
            return _empty_subgraph(-1)
        slot = self._slot(workspace.pk)
        cached = slot.snapshot
        if cached is not None and cached.version == version:
            return cached.subgraph
        with slot.lock:
            cached = slot.snapshot
            if cached is not None and cached.version == version:
                return cached.subgraph
            fresh = (
                _extend(cached, workspace.pk, version) if cached is not None and cached.extendable_to(version) else None
            )
            if fresh is None:
                fresh = _build(workspace.pk, version)
            slot.snapshot = fresh
            subgraph = fresh.subgraph
            log.log(
                logging.DEBUG if subgraph.incremental else logging.INFO,
                "graph snapshot of workspace %s (generation %s) %s: %d nodes, %d edges in %.3f s",
                workspace.pk,
                version.generation,
                "extended" if subgraph.incremental else "built",
                subgraph.csr.n_nodes,
                subgraph.csr.n_edges,
                subgraph.build_seconds,
            )
            return subgraph

    def _version(self, workspace: Workspace) -> _Version | None:
        # Plain SQL: it runs on every call, and the ORM's query building costs more than the lookup.
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT graph_generation, graph_rewrites, created_at FROM {table('Workspace')} WHERE id = %s",
                [workspace.pk],
            )
            row = cursor.fetchone()
        return None if row is None else _Version(int(row[0]), int(row[1]), row[2])

    def neighbourhood(
        self, workspace: Workspace, seed_ids: Sequence[uuid.UUID], *, hops: int, max_nodes: int
    ) -> Subgraph:
        """The whole snapshot (a superset of any neighbourhood; see the module docstring)."""
        return self.full_snapshot(workspace)

    def invalidate(self, workspace_id: int | None = None) -> None:
        """Drop cached snapshots (all of them when ``workspace_id`` is None)."""
        with self._lock:
            if workspace_id is None:
                self._slots.clear()
            else:
                self._slots.pop(workspace_id, None)

    def ping(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")

    def edges_added(self, workspace: Workspace, edges: Sequence[EdgeRef]) -> None:
        """Nothing to do: the writer bumped graph_generation, so the next read extends the snapshot."""

    def edges_removed(self, workspace: Workspace, edges: Sequence[EdgeRef]) -> None:
        """Nothing to do: the writer bumped graph_rewrites, so the next read rebuilds."""


_store: GraphStore | None = None
_store_lock = threading.Lock()


def _neo4j_store() -> GraphStore:
    # Imported lazily: the sql backend must not need the neo4j driver, and the module is optional.
    module = importlib.import_module("graph.bolt")
    store_class = module.Neo4jGraphStore
    return cast(
        GraphStore,
        store_class(uri=settings.NEO4J_URI, user=settings.NEO4J_USER, password=settings.NEO4J_PASSWORD),
    )


def graph_store() -> GraphStore:
    """The process's graph store for settings.GRAPH_BACKEND ("sql" or "neo4j")."""
    global _store
    if _store is None:
        with _store_lock:
            if _store is None:
                _store = _neo4j_store() if settings.GRAPH_BACKEND == "neo4j" else SqlGraphStore()
    return _store


def set_graph_store(store: GraphStore | None) -> None:
    """Replace the process's store (tests, benchmarks); None makes the next call build one again."""
    global _store
    with _store_lock:
        _store = store
