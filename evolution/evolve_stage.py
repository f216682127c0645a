"""The write-time evolve stage: the last stage of ingestion, after the memories are committed.

Ingestion (every path that creates memories through ``memories.services``) stores the rows, embeds them and
runs the typed slot policies inside its transaction (evolution.policies); once that transaction commits,
this stage runs the write-time evolvers whose trigger the new memories can set off. Today that is the one
the evolution cycle knows as write-triggered: EnhancedWorkingToEpisodic, which consolidates the working
buffer once it holds its adaptive threshold of items (``max(10, int(40 * (1 - 0.3 * load)))``,
``evolution.algorithms.consolidation``).

Bounded so ingestion keeps its rate: a batch without a working memory costs one pass over the batch and no
query; one with a working memory costs one aggregate query over the active working buffer (count, mean
length, items younger than 1 h). Only when the buffer is full does the stage queue an applied run of
WRITE_TIME_EVOLVERS as a background job (evolution.jobs; the request does not wait for it unless
``EVOLUTION_WORKER=inline``). A workspace with an applied run queued or running gets none (one applied run at
a time); that run, the next ingestion or the schedule consolidates the buffer. A failure here is logged and
never fails the ingestion, which has committed. ``evolution_settings["evolve_at_ingest"] = false`` turns the
stage off (default on: evolution runs as the final stage of ingestion).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from django.db.models import Avg, Count, Q
from django.db.models.functions import Length

from core.errors import Conflict, InvalidInput
from evolution import jobs
from evolution.algorithms.consolidation import MIN_THRESHOLD, RECENT_SECONDS, adaptive_threshold
from evolution.models import EvolutionRun
from memories.models import Memory, MemoryType, Status, Workspace
from surfacing.settings import register_evolution_setting

log = logging.getLogger(__name__)

SETTING: Final = "evolve_at_ingest"
WRITE_TIME_EVOLVERS: Final = ("EnhancedWorkingToEpisodic",)


def _boolean(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{name}: expected true or false", field=name)
    return value


register_evolution_setting(SETTING, True, _boolean)


def stage_enabled(workspace: Workspace) -> bool:
    return (workspace.evolution_settings or {}).get(SETTING, True) is not False


def working_buffer_full(*, workspace: Workspace, now: datetime) -> bool:
    """Whether the active working buffer holds at least its adaptive threshold at ``now`` (one query)."""
    row = Memory.objects.filter(workspace=workspace, memory_type=MemoryType.WORKING, status=Status.ACTIVE).aggregate(
        n=Count("id"),
        avg_len=Avg(Length("content")),
        recent=Count("id", filter=Q(created_at__gt=now - timedelta(seconds=RECENT_SECONDS))),
    )
    n = int(row["n"] or 0)
    if n < MIN_THRESHOLD:
        return False
    return n >= adaptive_threshold(float(row["avg_len"] or 0.0), min(1.0, int(row["recent"] or 0) / n))


def evolve_stage(workspace: Workspace, memories: Sequence[Memory], now: datetime) -> EvolutionRun | None:
    """Queue the write-time evolvers when the committed ``memories`` set one off; returns the run queued."""
    if not any(m.memory_type == MemoryType.WORKING for m in memories):
        return None
    if not stage_enabled(workspace) or not working_buffer_full(workspace=workspace, now=now):
        return None
    try:
        run = jobs.run_enqueue(workspace=workspace, actor=None, evolvers=list(WRITE_TIME_EVOLVERS), dry_run=False)
    except Conflict as exc:
        log.info("evolve stage of workspace %s left to the open run: %s", workspace.slug, exc)
        return None
    log.info("evolve stage of workspace %s queued run %s (working buffer full)", workspace.slug, run.pk)
    return run
