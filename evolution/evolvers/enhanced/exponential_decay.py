"""ExponentialDecay: retention decays with the time since a memory was last used."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

import numpy as np

from core.errors import InvalidInput
from evolution import selectors
from evolution.algorithms.decay import days_since_reference, decay_plan
from evolution.evolvers.base import EvolutionResult, MemoryUpdates, apply_updates, register
from evolution.evolvers.enhanced.common import _epochs, _setting
from evolution.models import EvolutionRun
from history.models import Action
from memories.models import MemoryType, Status, Workspace


@register
class ExponentialDecay:
    """retention = exp(-days / stability) for active episodic memories; archive below 0.1.

    days: since last access, else the event time (valid_from), else creation; stability: the memory's
    e-folding time in days (default 30). Pinned memories are decayed but never archived: a person
    pinned them. Settings: memory_types (list), archive_threshold, default_stability.
    """

    name: ClassVar[str] = "ExponentialDecay"
    writes_in_chunks: ClassVar[bool] = True

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        threshold = _setting(workspace, self.name, "archive_threshold", 0.1)
        default_stability = _setting(workspace, self.name, "default_stability", 30.0)
        types = ((workspace.evolution_settings or {}).get(self.name) or {}).get("memory_types") or [MemoryType.EPISODIC]
        if not isinstance(types, list) or not all(t in MemoryType.values for t in types):
            raise InvalidInput(
                f"evolution settings {self.name}.memory_types: {types!r} is not a list of memory types",
                field="memory_types",
            )
        rows = selectors.decay_rows(workspace=workspace, memory_types=types)
        n = len(rows)
        result.stats.update(memories=n, decayed=0, archived=0)
        if n == 0:
            return result
        ids, old, stab, last, event, created, pinned = zip(*rows, strict=True)
        days = days_since_reference(now.timestamp(), _epochs(last), _epochs(event), _epochs(created))
        plan = decay_plan(
            np.arange(n), days, np.asarray(stab, np.float64), threshold, default_stability=default_stability
        )
        archive = plan.archive & ~np.asarray(pinned, dtype=bool)
        new = plan.retention.tolist()
        day_list, stab_list = plan.days.tolist(), plan.stability.tolist()
        decayed = MemoryUpdates(self.name, Action.DECAY, "retention = exp(-days / stability)")
        archived = MemoryUpdates(
            self.name, Action.ARCHIVE, f"retention = exp(-days / stability) < {threshold:g}: soft-archived"
        )
        changed = np.flatnonzero((plan.retention != np.asarray(old, np.float64)) | archive)
        for k in changed.tolist():
            head = f"retention exp(-{day_list[k]:.2f}d/{stab_list[k]:.2f}d) = {new[k]:.6f}"
            if archive[k]:
                archived.add(
                    ids[k],
                    {"retention_score": (old[k], new[k]), "status": (Status.ACTIVE, Status.ARCHIVED)},
                    f"{head} < {threshold:g}: archived",
                )
            else:
                kept = "pinned, kept" if plan.archive[k] else "kept"
                decayed.add(ids[k], {"retention_score": (old[k], new[k])}, f"{head}: {kept}")
        result.records = apply_updates([decayed, archived], workspace=workspace, run=run, dry_run=dry_run, now=now)
        result.stats.update(decayed=len(decayed), archived=len(archived))
        return result
