"""Reads for the evolution pages: the proposal queue, runs and their diffs, drift timelines, curation history.

Each function is one or two queries whatever the page size (the views pin their query counts in tests);
memory rows are loaded without their embeddings, which no page shows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from django.db.models import Count, Q

from evolution.curation import CURATION_EVOLVER
from evolution.models import EvolutionRun, Proposal, ProposalKind, ProposalStatus
from history.models import Action, EvolutionRecord, RecordLink
from memories.models import Memory, Status, Workspace

DECIDED: Final = (ProposalStatus.APPROVED, ProposalStatus.REJECTED, ProposalStatus.MODIFIED)
_IN_CHUNK: Final = 900


def as_uuids(values: Iterable[Any]) -> list[uuid.UUID]:
    """The values that are memory ids, as UUIDs, without repeats (stored id lists are plain JSON)."""
    out: dict[uuid.UUID, None] = {}
    for value in values:
        try:
            out[value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))] = None
        except ValueError:
            continue
    return list(out)


def memories_shown(*, workspace: Workspace, ids: Iterable[Any]) -> dict[uuid.UUID, Memory]:
    """Memory rows (no embedding, scores joined) of the ids that exist in the workspace, keyed by id."""
    wanted = as_uuids(ids)
    found: dict[uuid.UUID, Memory] = {}
    for start in range(0, len(wanted), _IN_CHUNK):
        rows = (
            Memory.objects.select_related("score")
            .filter(workspace=workspace, id__in=wanted[start : start + _IN_CHUNK])
            .defer("embedding")
        )
        found.update((m.id, m) for m in rows)
    return found


# -- proposals ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueuePage:
    proposals: list[Proposal]
    next_after: int | None


def proposal_counts(*, workspace: Workspace) -> dict[str, int]:
    """Proposals per status (every status present, zero when none)."""
    counts = dict.fromkeys(ProposalStatus.values, 0)
    rows = Proposal.objects.filter(workspace=workspace).values_list("status").annotate(n=Count("id"))
    counts.update({status: n for status, n in rows})
    return counts


def proposal_queue(*, workspace: Workspace, tab: str, kind: str = "", after: int = 0, limit: int = 50) -> QueuePage:
    """One page of proposals for a tab: pending (oldest first: the review order), decided or vetoed
    (newest first). `after` is the cursor of the previous page (a proposal id)."""
    rows = Proposal.objects.filter(workspace=workspace).select_related("decided_by", "applied_record")
    if kind:
        rows = rows.filter(kind=kind)
    if tab == "pending":
        rows = rows.filter(status=ProposalStatus.PENDING, id__gt=after).order_by("id")
    else:
        statuses = DECIDED if tab == "decided" else (ProposalStatus.VETOED,)
        rows = rows.filter(status__in=statuses).order_by("-id")
        if after:
            rows = rows.filter(id__lt=after)
    page = list(rows[: limit + 1])
    return QueuePage(page[:limit], page[limit - 1].pk if len(page) > limit else None)


def vetoed_strategies(*, workspace: Workspace, limit: int = 20) -> list[Proposal]:
    """The newest strategy proposals the covenant (or a falling weight) vetoed, with their reasons."""
    rows = Proposal.objects.filter(workspace=workspace, kind=ProposalKind.STRATEGY, status=ProposalStatus.VETOED)
    return list(rows.order_by("-id")[:limit])


def proposal_one(*, workspace: Workspace, proposal_id: int) -> Proposal | None:
    return (
        Proposal.objects.filter(workspace=workspace, pk=proposal_id)
        .select_related("decided_by", "applied_record")
        .first()
    )


def pending_count(*, slug: str, user_id: int) -> int:
    """Pending proposals of the workspace `slug`, counted only when `user_id` is one of its members."""
    return Proposal.objects.filter(
        workspace__slug=slug, workspace__memberships__user_id=user_id, status=ProposalStatus.PENDING
    ).count()


# -- runs -----------------------------------------------------------------------------------------


def run_history(*, workspace: Workspace, limit: int = 50) -> list[EvolutionRun]:
    """Newest runs first with who started them (one query)."""
    return list(
        EvolutionRun.objects.filter(workspace=workspace).select_related("started_by").order_by("-started_at")[:limit]
    )


def run_one(*, workspace: Workspace, run_id: uuid.UUID) -> EvolutionRun | None:
    return EvolutionRun.objects.filter(workspace=workspace, id=run_id).select_related("started_by").first()


@dataclass(frozen=True)
class ActionCount:
    evolver: str
    action: str
    records: int
    memories: int


def run_action_counts(*, run: EvolutionRun) -> list[ActionCount]:
    """Per (evolver, action) of a run: how many records, and how many distinct memories they touch."""
    records = {
        (e, a): n
        for e, a, n in EvolutionRecord.objects.filter(run=run)
        .values_list("evolver", "action")
        .annotate(n=Count("id"))
        .order_by()
    }
    touched = {
        (e, a): n
        for e, a, n in RecordLink.objects.filter(record__run=run)
        .values_list("record__evolver", "record__action")
        .annotate(n=Count("memory_id", distinct=True))
        .order_by()
    }
    return [
        ActionCount(evolver, action, n, touched.get((evolver, action), 0))
        for (evolver, action), n in sorted(records.items())
    ]


def run_records_page(*, run: EvolutionRun, after: int = 0, limit: int = 50) -> tuple[list[EvolutionRecord], int | None]:
    """A page of a run's records in order, with the cursor of the next page (None on the last)."""
    rows = list(EvolutionRecord.objects.filter(run=run, id__gt=after).order_by("id")[: limit + 1])
    return rows[:limit], (rows[limit - 1].pk if len(rows) > limit else None)


def revertible_left(*, run: EvolutionRun) -> int:
    """Records of an applied run that are not reverted yet."""
    return EvolutionRecord.objects.filter(run=run, dry_run=False, reverted_at__isnull=True).count()


# -- curation history, drift ----------------------------------------------------------------------


def curation_records(*, workspace: Workspace, actions: Sequence[str], limit: int = 20) -> list[EvolutionRecord]:
    """The newest curation records of `actions` (contradictions: supersede, resolve; drift: annotate)."""
    rows = EvolutionRecord.objects.filter(workspace=workspace, evolver=CURATION_EVOLVER, action__in=list(actions))
    return list(rows.select_related("actor").order_by("-id")[:limit])


def drifting_memories(*, workspace: Workspace, limit: int = 100) -> list[Memory]:
    """Active memories with a drift flag, most recently changed first."""
    rows = Memory.objects.filter(workspace=workspace, status=Status.ACTIVE).exclude(drift_flags=[])
    return list(rows.defer("embedding").order_by("-updated_at")[:limit])


def replace_records(*, workspace: Workspace, ids: Sequence[uuid.UUID], per_memory: int = 20) -> list[EvolutionRecord]:
    """Applied REPLACE records of the given memories (what each change replaced with what), newest first."""
    if not ids:
        return []
    rows = EvolutionRecord.objects.filter(
        Q(links__memory_id__in=list(ids)),
        workspace=workspace,
        action=Action.REPLACE,
        dry_run=False,
    ).distinct()
    return list(rows.order_by("-id")[: per_memory * len(ids)])


def last_scheduled_run(*, workspace: Workspace) -> EvolutionRun | None:
    """The newest run the workspace's schedule queued (any status)."""
    return EvolutionRun.objects.filter(workspace=workspace, scheduled=True).order_by("-started_at").first()
