"""HebbianCoRetrieval: memories retrieved together are linked, and their retention boosted."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

import numpy as np

from evolution import retrieval_stats, selectors
from evolution.algorithms.hebbian import hebbian_boosts
from evolution.evolvers.base import EvolutionResult, MemoryUpdates, apply_updates, register
from evolution.evolvers.enhanced.common import _setting
from evolution.models import EvolutionRun
from history.models import Action
from memories.models import Workspace


@register
class HebbianCoRetrieval:
    """Memories retrieved together wire together: CO_RETRIEVED counts, then capped retention boosts.

    Counting: every 2-combination of each used result set (search, get, context, helpful; the
    inspector's dry reads never count, docs/evolution.md, hub bias) adds 1 to its CO_RETRIEVED edge. The
    scheduled retrieval job keeps the counts every 5 minutes; this evolver brings them up to now first
    with the job's own count (evolution.retrieval_stats), so each event is counted once whoever gets to it.
    The counts are observations and are not in this evolver's records. Boost: for every edge with count
    >= 3, both active ends get min(0.3, (count - 3) * 0.02), each node once per run by its strongest edge.
    Settings: weight_threshold, retention_boost_per_unit, max_boost.
    """

    name: ClassVar[str] = "HebbianCoRetrieval"
    writes_in_chunks: ClassVar[bool] = True

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        threshold = _setting(workspace, self.name, "weight_threshold", 3.0)
        per_unit = _setting(workspace, self.name, "retention_boost_per_unit", 0.02)
        max_boost = _setting(workspace, self.name, "max_boost", 0.3)
        # Every edge strong enough to boost and every edge counted now, as they stand after counting (as
        # planned, in a dry run); an edge below the threshold that no new set touched cannot boost anything.
        counted = retrieval_stats.co_retrievals_count(
            workspace=workspace, now=now, dry_run=dry_run, min_count=threshold
        )
        active = selectors.active_retention(workspace=workspace)
        ids: list[str] = [mid for mid, _ in active]
        position = {mid: k for k, mid in enumerate(ids)}

        def pos(mid: str) -> int:
            # Ends that are not active take positions after the active ones (they are never boosted).
            k = position.get(mid)
            if k is None:
                k = position[mid] = len(ids)
                ids.append(mid)
            return k

        edge_s = np.fromiter((pos(s) for s, _, _ in counted.edges), dtype=np.int64, count=len(counted.edges))
        edge_t = np.fromiter((pos(t) for _, t, _ in counted.edges), dtype=np.int64, count=len(counted.edges))
        edge_counts = np.fromiter((c for _, _, c in counted.edges), dtype=np.float64, count=len(counted.edges))
        n_active = len(active)
        retention = np.zeros(len(ids), dtype=np.float64)
        retention[:n_active] = [r for _, r in active]
        boosts = hebbian_boosts(edge_s, edge_t, edge_counts, retention, threshold, per_unit, max_boost)
        updates = MemoryUpdates(
            self.name,
            Action.BOOST,
            f"Hebbian co-retrieval: + min({max_boost:g}, (count - {threshold:g}) x {per_unit:g})",
        )
        old_list, new_list, boost_list = boosts.old.tolist(), boosts.new.tolist(), boosts.boost.tolist()
        partner_list, count_list = boosts.partner.tolist(), boosts.edge_count.tolist()
        for k, node in enumerate(boosts.indices.tolist()):
            if node >= n_active:
                continue
            capped = " (capped at 1.0)" if new_list[k] < old_list[k] + boost_list[k] else ""
            updates.add(
                ids[node],
                {"retention_score": (active[node][1], new_list[k])},
                f"co-retrieved with {ids[partner_list[k]]} {count_list[k]:g}x (>= {threshold:g}): retention "
                f"{old_list[k]:.6f} + {boost_list[k]:.6f} -> {new_list[k]:.6f}{capped}",
            )
        result.records.extend(apply_updates([updates], workspace=workspace, run=run, dry_run=dry_run, now=now))
        result.stats.update(
            result_sets=counted.result_sets,
            edges_updated=counted.edges_updated,
            edges_created=counted.edges_created,
            boosted=len(updates),
        )
        return result
