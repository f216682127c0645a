"""InterferenceBasedConsolidation: similar memories compete for retention."""

from __future__ import annotations

import zlib
from collections import Counter
from datetime import datetime
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from evolution import selectors
from evolution.algorithms.interference import apply_interference, interference_pairs
from evolution.evolvers.base import EvolutionResult, MemoryUpdates, apply_updates, register
from evolution.evolvers.enhanced.common import FloatArray, _setting
from evolution.models import EvolutionRun
from history.models import Action
from memories.algorithms.embedding import stack_embeddings
from memories.embeddings import embedder_for
from memories.models import Workspace

IntArray = npt.NDArray[np.intp]

INTERFERENCE_MARKER = selectors.INTERFERENCE_MARKER


def _embedding_fingerprint(blob: bytes) -> str:
    return f"{zlib.crc32(blob):08x}"


@register
class InterferenceBasedConsolidation:
    """Similar memories compete: score *= (1 - cosine * 0.05) for both ends of each pair.

    Pairs: cosine >= 0.85 among a memory's top 5 neighbours, each unordered pair once. Incremental:
    only memories whose embedding has not been compared yet (metadata interference_checked differs from
    the CRC-32 of the stored embedding: new memories, re-embedded ones, or ones a revert put back) are
    searched, against the whole matrix of active embedded memories. The marker is written in the same
    record as the penalty (or an "annotate" record), so reverting a run also makes its memories new
    again. Settings: similarity_threshold, interference_weight, top_k_neighbors.
    """

    name: ClassVar[str] = "InterferenceBasedConsolidation"
    writes_in_chunks: ClassVar[bool] = True

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        threshold = _setting(workspace, self.name, "similarity_threshold", 0.85)
        weight = _setting(workspace, self.name, "interference_weight", 0.05)
        top_k = int(_setting(workspace, self.name, "top_k_neighbors", 5))
        model = embedder_for(workspace).name
        rows = [row for row in selectors.embedding_rows(workspace=workspace, model=model) if row[2]]
        result.stats.update(memories=len(rows), candidates=0, pairs=0, penalised=0)
        if not rows:
            return result
        # Only vectors of the workspace's model are read; a blob of another length under that name cannot
        # be compared either, so only the most common width takes part.
        width = Counter(len(row[2]) for row in rows).most_common(1)[0][0]
        rows = [row for row in rows if len(row[2]) == width]
        ids = [row[0] for row in rows]
        retention = np.asarray([row[1] for row in rows], dtype=np.float64)
        blobs = [row[2] for row in rows]
        fingerprints = [_embedding_fingerprint(b) for b in blobs]
        candidates = [k for k, row in enumerate(rows) if row[3] != fingerprints[k]]
        result.stats.update(memories=len(rows), candidates=len(candidates))
        if not candidates:
            return result
        matrix = stack_embeddings(blobs, width // 4)
        pairs = interference_pairs(matrix, candidates, top_k=top_k, threshold=threshold)
        applied = apply_interference(retention, pairs.i, pairs.j, pairs.sims, weight)
        partners = _partners_by_node(applied.pairs.i, applied.pairs.j, applied.pairs.sims)
        candidate_set = set(candidates)
        metadata = selectors.metadata_of(workspace=workspace, ids=[ids[k] for k in candidates])
        penalised = MemoryUpdates(self.name, Action.DECAY, f"interference: retention x (1 - cosine x {weight:g})")
        checked = MemoryUpdates(
            self.name, Action.ANNOTATE, f"compared with the workspace: no memory with cosine >= {threshold:g}"
        )
        old_list, new_list, factor_list = applied.old.tolist(), applied.new.tolist(), applied.factor.tolist()
        for k, index in enumerate(applied.indices.tolist()):
            mid = ids[index]
            changes: dict[str, tuple[Any, Any]] = {"retention_score": (old_list[k], new_list[k])}
            if index in candidate_set:
                old_meta = metadata.get(mid, {})
                changes["metadata"] = (old_meta, {**old_meta, INTERFERENCE_MARKER: fingerprints[index]})
            listed = ", ".join(f"{ids[o]} (cos {s:.4f})" for o, s in partners[index])
            penalised.add(
                mid,
                changes,
                f"interference with {len(partners[index])} similar memories [{listed}]: "
                f"retention {old_list[k]:.6f} x {factor_list[k]:.6f} = {new_list[k]:.6f}",
            )
        touched = set(applied.indices.tolist())
        for index in candidates:
            if index in touched:
                continue
            mid = ids[index]
            old_meta = metadata.get(mid, {})
            checked.add(mid, {"metadata": (old_meta, {**old_meta, INTERFERENCE_MARKER: fingerprints[index]})}, "")
        result.records = apply_updates([penalised, checked], workspace=workspace, run=run, dry_run=dry_run, now=now)
        result.stats.update(pairs=int(applied.pairs.i.size), penalised=len(penalised))
        return result


def _partners_by_node(i: IntArray, j: IntArray, sims: FloatArray) -> dict[int, list[tuple[int, float]]]:
    """For every node of the pairs, its partners and cosines (one sort instead of a scan per node)."""
    nodes = np.concatenate([i, j])
    others = np.concatenate([j, i])
    cos = np.concatenate([sims, sims])
    order = np.argsort(nodes, kind="stable")
    out: dict[int, list[tuple[int, float]]] = {}
    for node, other, sim in zip(nodes[order].tolist(), others[order].tolist(), cos[order].tolist(), strict=True):
        out.setdefault(node, []).append((other, sim))
    return out
