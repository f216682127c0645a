"""A populated workspace: one of each kind of row a route can name (memories, an edge, a resolved goal, an
applied run with its records, a pending proposal, a dream report, a session pin, outcomes), for the schema
fuzz and the isolation sweep, which fill path parameters with these ids."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from evolution import dream, engine
from evolution import services as evolution_services
from evolution.engine_inputs import OutcomeInput
from evolution.models import Proposal, ProposalStatus
from history.models import EvolutionRecord
from memories import services
from memories.inputs import MemoryInput
from memories.models import Memory, Status, Workspace
from surfacing import services as surfacing_services

LESSON = "Always check asarUnpack for renderer files"


@dataclass(frozen=True)
class World:
    """The ids of one populated workspace, as strings (path parameters are strings)."""

    workspace: Workspace
    slug: str
    secret: str
    memory_ids: tuple[str, ...]
    goal_id: str
    run_id: str
    record_ids: tuple[str, ...]
    proposal_id: str
    report_id: str
    session_id: str


def populate(workspace: Workspace, owner: Any, session_id: str, secret: str = "") -> World:
    """Fill ``workspace`` with one row of each kind a URL names, through the services a client's calls reach.

    Every memory's content starts with ``secret``, so a test can look for it in what another user is shown.
    """
    now = timezone.now()

    def remember(content: str, **fields: Any) -> Memory:
        item = MemoryInput(content=f"{secret} {content}".strip(), **fields)
        return services.memory_create(workspace=workspace, actor=owner, item=item)

    decision = remember("We picked JWT for auth", memory_type="decision", tags=("auth",))
    reason = remember("JWT needs no sticky sessions", subject="auth")
    old = remember("Deployed the login service", memory_type="episodic")
    # An old episode gives the decay evolver something to change, so the applied run has records.
    then = now - timedelta(days=40)
    Memory.objects.filter(pk=old.pk).update(created_at=then, activation_last_boost_at=then)
    goal = remember("Rotate the API tokens", memory_type="goal")
    remember("Rotate the API tokens", memory_type="outcome")  # the evidence that resolves the goal
    services.edge_link(workspace=workspace, source=decision, target=reason, edge_type="RELATED")
    run = evolution_services.evolution_run(
        workspace=workspace, actor=owner, evolvers=["ExponentialDecay", "GoalResolver"], dry_run=False, now=now
    )
    assert Memory.objects.get(pk=goal.pk).status == Status.RESOLVED
    records = EvolutionRecord.objects.filter(workspace=workspace, run=run).order_by("pk").values_list("pk", flat=True)
    for days in (3, 2, 1):
        engine.outcome_record(
            workspace=workspace,
            item=OutcomeInput(
                task_type="Electron packaging",
                result="fail",
                approach="electron-builder",
                lesson=f"{LESSON} {secret}".strip(),
                created_at=now - timedelta(days=days),
            ),
            now=now,
        )
    proposal = Proposal.objects.filter(workspace=workspace, status=ProposalStatus.PENDING).order_by("pk").first()
    report = dream.dream_run(workspace=workspace, actor=owner, now=now)
    surfacing_services.pin_put(workspace=workspace, session_id=session_id, memory=decision, weight=2)
    assert proposal is not None and report.pk is not None and records
    return World(
        workspace=workspace,
        slug=workspace.slug,
        secret=secret,
        memory_ids=tuple(str(m.id) for m in (decision, reason, old, goal)),
        goal_id=str(goal.id),
        run_id=str(run.id),
        record_ids=tuple(str(pk) for pk in records),
        proposal_id=str(proposal.pk),
        report_id=str(report.pk),
        session_id=session_id,
    )


@pytest.fixture
def populated() -> Callable[..., World]:
    """``populate``, for the test to call on the workspaces it makes."""
    return populate
