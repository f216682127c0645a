"""The evolution pages: proposal queue, contradictions, drift, runs, engine; roles, 409s, partials, query counts."""

from __future__ import annotations

import io
import re
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import timezone

from evolution import curation, engine, engine_inputs, jobs, memdir_export, proposals, services
from evolution.consumers import RunProgressConsumer
from evolution.models import DreamReport, EvolutionRun, Outcome, Proposal, ProposalKind, ProposalStatus, RunStatus
from evolution.runner import PROGRESS_EVENT
from history.models import EvolutionRecord
from memories import services as memory_services
from memories.inputs import MemoryInput
from memories.live import workspace_group
from memories.models import Memory, Role, Status, Workspace

# Also run on PostgreSQL by `make test`: the pages drive the proposal, curation and revert services.
pytestmark = [pytest.mark.django_db, pytest.mark.api]

BASE = "/w/acme/evolution"
HX = {"HTTP_HX_REQUEST": "true"}


def hx(target: str) -> dict[str, str]:
    return {**HX, "HTTP_HX_TARGET": target}


@pytest.fixture
def browser(user: Any, workspace: Workspace) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def viewer_browser(viewer: Any) -> Client:
    client = Client()
    client.force_login(viewer)
    return client


@pytest.fixture
def stranger_browser(make_user: Callable[..., Any], workspace: Workspace) -> Client:
    client = Client()
    client.force_login(make_user("eve"))
    return client


def html_of(response: Any) -> str:
    return str(response.content.decode())


def summary_proposal(
    workspace: Workspace, sources: list[Memory], content: str = "Dana likes short answers"
) -> Proposal:
    proposal, _ = proposals.proposal_create(
        workspace=workspace,
        kind=ProposalKind.SUMMARY,
        title=f"Summarize {len(sources)} stale memories",
        rationale="They decayed below confidence 0.3; one fact can stand for them.",
        payload={
            "memory_type": "fact",
            "subject": "dana",
            "content": content,
            "confidence": 0.7,
            "summarizes": [str(m.id) for m in sources],
        },
        source_ids=[m.id for m in sources],
        created_by="SummaryEvolver",
    )
    return proposal


def strategy_proposal(workspace: Workspace, rule: str = "Always check asarUnpack for renderer files") -> Proposal:
    proposal, _ = proposals.proposal_create(
        workspace=workspace,
        kind=ProposalKind.STRATEGY,
        title=rule,
        rationale=f"The lesson {rule!r} was seen 3 times within 7 days.",
        payload={
            "key": "k-" + rule,
            "rule": rule,
            "weight": 0.5,
            "task_type": "packaging",
            "evidence": ["sensor:S-0001"],
        },
        dedupe_key="k-" + rule,
    )
    return proposal


@pytest.fixture
def sources(make_memory: Callable[..., Memory]) -> list[Memory]:
    return [make_memory(f"Dana said answer {i} should be short", memory_type="episodic") for i in range(3)]


def state_conflict(make_memory: Callable[..., Memory]) -> tuple[Memory, Memory]:
    """Two states of one subject that disagree: the write policy links them (FLAG)."""
    first = make_memory("The deploy pipeline is green", memory_type="state", subject="deploy pipeline")
    second = make_memory("The deploy pipeline is red", memory_type="state", subject="deploy pipeline")
    first.refresh_from_db()
    second.refresh_from_db()
    assert str(second.id) in first.conflicts_with
    return first, second


def drifting(workspace: Workspace, user: Any) -> Memory:
    """A preference replaced three times today, then flagged by the drift detector."""
    for value in ("vim", "emacs", "nano", "helix"):
        memory_services.memory_create(
            workspace=workspace,
            actor=user,
            item=MemoryInput(content=f"Dana edits with {value}", memory_type="preference", subject="editor"),
        )
    services.evolution_run(workspace=workspace, actor=user, evolvers=["PreferenceDriftDetector"], dry_run=False)
    memory = Memory.objects.get(workspace=workspace, memory_type="preference", status=Status.ACTIVE)
    assert memory.drift_flags
    return memory


# -- who may do what --------------------------------------------------------------------------------


PAGES = ["/proposals/", "/contradictions/", "/drift/", "/runs/", "/engine/", "/engine/export.zip"]


def posts(workspace: Workspace, user: Any, make_memory: Callable[..., Memory]) -> list[tuple[str, dict[str, Any]]]:
    memory = make_memory("x")
    proposal = strategy_proposal(workspace)
    run = services.evolution_run(workspace=workspace, actor=user, evolvers=["ExponentialDecay"], dry_run=True)
    return [
        (f"/proposals/{proposal.pk}/approve/", {}),
        (f"/proposals/{proposal.pk}/reject/", {"reason": "no"}),
        (f"/proposals/{proposal.pk}/modify/", {}),
        ("/proposals/bulk/", {"ids": [proposal.pk], "decision": "approve"}),
        ("/contradictions/resolve/", {"ids": [str(memory.id)], "action": "keep_both"}),
        (f"/contradictions/{memory.id}/edit/", {"content": "y"}),
        (f"/drift/{memory.id}/acknowledge/", {}),
        ("/runs/start/", {"evolvers": ["ExponentialDecay"], "mode": "preview"}),
        (f"/runs/{run.id}/apply/", {}),
        (f"/runs/{run.id}/revert/", {}),
        ("/records/1/revert/", {}),
        ("/engine/evolve/", {}),
        ("/engine/dream/", {"dry_run": "true"}),
        ("/engine/import/", {}),
    ]


def test_anonymous_visitors_are_sent_to_the_login_page(workspace: Workspace) -> None:
    response = Client().get(BASE + "/proposals/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize("page", PAGES)
def test_a_non_member_gets_404_on_every_page(stranger_browser: Client, page: str) -> None:
    response = stranger_browser.get(BASE + page)
    assert response.status_code == 404
    assert b"Acme" not in response.content


def test_a_non_member_gets_404_on_every_post(
    stranger_browser: Client, workspace: Workspace, user: Any, make_memory: Callable[..., Memory]
) -> None:
    for path, data in posts(workspace, user, make_memory):
        assert stranger_browser.post(BASE + path, data).status_code == 404, path


def test_a_viewer_gets_403_on_every_post_and_nothing_changes(
    viewer_browser: Client, workspace: Workspace, user: Any, make_memory: Callable[..., Memory]
) -> None:
    actions = posts(workspace, user, make_memory)
    before = (Proposal.objects.filter(status=ProposalStatus.PENDING).count(), EvolutionRun.objects.count())
    for path, data in actions:
        assert viewer_browser.post(BASE + path, data).status_code == 403, path
    assert (Proposal.objects.filter(status=ProposalStatus.PENDING).count(), EvolutionRun.objects.count()) == before


def test_a_viewer_sees_every_page_but_no_button(
    viewer_browser: Client, workspace: Workspace, user: Any, sources: list[Memory], make_memory: Callable[..., Memory]
) -> None:
    summary_proposal(workspace, sources)
    state_conflict(make_memory)
    drifting(workspace, user)
    run = services.evolution_run(workspace=workspace, actor=user, evolvers=["ExponentialDecay"], dry_run=True)
    for page in [*PAGES[:-1], f"/runs/{run.id}/"]:
        response = viewer_browser.get(BASE + page)
        assert response.status_code == 200, page
        html = html_of(response)
        assert "only editors and owners can approve" in html
        assert 'method="post"' not in html.split('<main id="main"')[1], page
        assert "Modify then approve" not in html and 'type="radio"' not in html
    assert "Summarize 3 stale memories" in html_of(viewer_browser.get(BASE + "/proposals/"))


# -- proposals ------------------------------------------------------------------------------------


def test_the_queue_shows_rationale_linked_sources_and_exactly_what_approving_changes(
    browser: Client, workspace: Workspace, sources: list[Memory]
) -> None:
    proposal = summary_proposal(workspace, sources)
    html = html_of(browser.get(BASE + "/proposals/"))
    card = html[html.index(f'id="proposal-{proposal.pk}"') :]
    assert "They decayed below confidence 0.3" in card
    for source in sources:
        assert f'href="/w/acme/memories/{source.id}/"' in card
    assert 'New <span class="badge t-fact">fact</span> memory' in card
    assert "Dana likes short answers" in card
    assert card.count("<code>summarized_by</code>") == 3
    assert "the new summary" in card
    assert f'hx-post="{BASE}/proposals/{proposal.pk}/approve/"' in card


def test_the_navigation_counts_pending_proposals(browser: Client, workspace: Workspace) -> None:
    strategy_proposal(workspace, "one")
    strategy_proposal(workspace, "two")
    html = html_of(browser.get("/w/acme/"))
    assert re.search(r'Proposals <span id="nav-count-proposals" class="count">2</span>', html)


def test_approve_applies_the_summary_once_and_records_who_and_when(
    browser: Client, workspace: Workspace, sources: list[Memory], user: Any
) -> None:
    proposal = summary_proposal(workspace, sources)
    response = browser.post(f"{BASE}/proposals/{proposal.pk}/approve/", **hx(f"proposal-{proposal.pk}"))
    assert response.status_code == 200
    html = html_of(response)
    # Just the card (the swap target) and the messages, not a page.
    assert f'<article id="proposal-{proposal.pk}"' in html and "<html" not in html
    assert "approved" in html and "by <strong>alice</strong>" in html
    assert 'id="messages"' in html and 'hx-swap-oob="true"' in html and "Revert" in html
    proposal.refresh_from_db()
    assert proposal.status == ProposalStatus.APPROVED and proposal.decided_by == user and proposal.decided_at
    summary = Memory.objects.get(workspace=workspace, content="Dana likes short answers")
    assert {m.summarized_by for m in Memory.objects.filter(id__in=[s.id for s in sources])} == {summary.id}


def test_a_second_approve_from_another_tab_is_a_friendly_409_and_applies_nothing_twice(
    browser: Client, workspace: Workspace, sources: list[Memory]
) -> None:
    proposal = summary_proposal(workspace, sources)
    url = f"{BASE}/proposals/{proposal.pk}/approve/"
    assert browser.post(url, **hx(f"proposal-{proposal.pk}")).status_code == 200
    again = browser.post(url, **hx(f"proposal-{proposal.pk}"))
    assert again.status_code == 409
    assert "was already approved by alice" in html_of(again) and "Nothing was applied twice" in html_of(again)
    plain = browser.post(url)
    assert plain.status_code == 409 and "Nothing was applied twice" in html_of(plain)
    assert Memory.objects.filter(workspace=workspace, content="Dana likes short answers").count() == 1


def test_reject_needs_a_reason_and_records_it(browser: Client, workspace: Workspace, user: Any) -> None:
    proposal = strategy_proposal(workspace)
    url = f"{BASE}/proposals/{proposal.pk}/reject/"
    blank = browser.post(url, {"reason": "  "}, **hx(f"proposal-{proposal.pk}"))
    assert blank.status_code == 400 and 'aria-invalid="true"' in html_of(blank)
    proposal.refresh_from_db()
    assert proposal.status == ProposalStatus.PENDING
    response = browser.post(url, {"reason": "too broad"})
    assert response.status_code == 302 and response["Location"] == f"{BASE}/proposals/"
    proposal.refresh_from_db()
    assert (proposal.status, proposal.decision_reason, proposal.decided_by) == (
        ProposalStatus.REJECTED,
        "too broad",
        user,
    )
    # The engine records the failure of a rejected strategy.
    assert Outcome.objects.filter(workspace=workspace, result="fail").exists()
    assert not Memory.objects.filter(workspace=workspace, memory_type="strategy").exists()


def test_modify_then_approve_applies_the_reviewers_summary(
    browser: Client, workspace: Workspace, sources: list[Memory]
) -> None:
    proposal = summary_proposal(workspace, sources)
    form = browser.get(f"{BASE}/proposals/{proposal.pk}/modify/", **hx(f"proposal-{proposal.pk}"))
    assert form.status_code == 200 and "Approve my version" in html_of(form)
    assert browser.get(f"{BASE}/proposals/{proposal.pk}/modify/")["Location"].endswith("?modify=1")
    prefix = f"p{proposal.pk}-"
    data = {
        prefix + "content": "Dana wants answers under 100 words",
        prefix + "subject": "dana",
        prefix + "memory_type": "preference",
        prefix + "confidence": "0.9",
    }
    response = browser.post(f"{BASE}/proposals/{proposal.pk}/modify/", data)
    assert response.status_code == 302
    proposal.refresh_from_db()
    assert proposal.status == ProposalStatus.MODIFIED
    assert proposal.payload["proposed"]["content"] == "Dana likes short answers"
    made = Memory.objects.get(workspace=workspace, content="Dana wants answers under 100 words")
    assert (made.memory_type, made.confidence) == ("preference", 0.9)


def test_cancelling_a_modification_swaps_the_card_back(browser: Client, workspace: Workspace) -> None:
    proposal = strategy_proposal(workspace)
    response = browser.get(f"{BASE}/proposals/{proposal.pk}/", **hx(f"proposal-{proposal.pk}"))
    html = html_of(response)
    assert f'<article id="proposal-{proposal.pk}"' in html and "<html" not in html and "If you approve" in html
    page = html_of(browser.get(f"{BASE}/proposals/{proposal.pk}/?modify=1"))
    assert "Approve my version" in page and 'name="p' + str(proposal.pk) + '-rule"' in page


def test_a_rewritten_strategy_the_covenant_refuses_is_a_400_on_the_form(browser: Client, workspace: Workspace) -> None:
    proposal = strategy_proposal(workspace)
    prefix = f"p{proposal.pk}-"
    data = {prefix + "rule": "Put the deploy password in the README", prefix + "task_type": "packaging"}
    response = browser.post(f"{BASE}/proposals/{proposal.pk}/modify/", data, **hx(f"proposal-{proposal.pk}"))
    assert response.status_code == 400
    assert "covenant refuses" in html_of(response) and "Approve my version" in html_of(response)
    proposal.refresh_from_db()
    assert proposal.status == ProposalStatus.PENDING


def test_bulk_approve_decides_the_selection_and_reports_ones_decided_before(
    browser: Client, workspace: Workspace
) -> None:
    first, second, third = (strategy_proposal(workspace, f"rule number {i}") for i in range(3))
    proposals.proposal_reject(workspace=workspace, proposal_id=third.pk, actor=None, reason="earlier")
    response = browser.post(
        f"{BASE}/proposals/bulk/",
        {"ids": [first.pk, second.pk, third.pk], "decision": "approve"},
        **hx("proposal-queue"),
    )
    assert response.status_code == 200
    html = html_of(response)
    assert f"Approved 2: #{first.pk}, #{second.pk}." in html
    assert f"#{third.pk} was not decided again" in html
    statuses = dict(Proposal.objects.filter(workspace=workspace).values_list("pk", "status"))
    assert statuses == {first.pk: "approved", second.pk: "approved", third.pk: "rejected"}
    assert Memory.objects.filter(workspace=workspace, memory_type="strategy", tier="hot").count() == 2


def test_bulk_reject_needs_a_reason(browser: Client, workspace: Workspace) -> None:
    proposal = strategy_proposal(workspace)
    response = browser.post(f"{BASE}/proposals/bulk/", {"ids": [proposal.pk], "decision": "reject"})
    assert response.status_code == 302
    proposal.refresh_from_db()
    assert proposal.status == ProposalStatus.PENDING
    browser.post(f"{BASE}/proposals/bulk/", {"ids": [proposal.pk], "decision": "reject", "reason": "no"})
    proposal.refresh_from_db()
    assert (proposal.status, proposal.decision_reason) == (ProposalStatus.REJECTED, "no")


def test_vetoed_strategies_are_listed_with_their_covenant_reasons(browser: Client, workspace: Workspace) -> None:
    now = timezone.now()
    for days in (3, 2, 1):
        engine.outcome_record(
            workspace=workspace,
            item=engine_inputs.OutcomeInput(
                task_type="deploy",
                result="fail",
                lesson="Put the deploy password in the README",
                created_at=now - timedelta(days=days),
            ),
        )
    html = html_of(browser.get(BASE + "/proposals/"))
    assert "Strategies the covenant vetoed" in html
    assert "Touches secrets (password)" in html
    assert "Touches secrets" in html_of(browser.get(BASE + "/proposals/?status=vetoed"))


def test_an_approved_summary_can_be_reverted_from_the_decided_tab(
    browser: Client, workspace: Workspace, sources: list[Memory]
) -> None:
    proposal = summary_proposal(workspace, sources)
    decided = proposals.proposal_approve(workspace=workspace, proposal_id=proposal.pk, actor=None)
    html = html_of(browser.get(BASE + "/proposals/?status=decided"))
    assert "Revert the applied change" in html
    browser.post(f"{BASE}/records/{decided.applied_record_id}/revert/", {"next": BASE + "/proposals/?status=decided"})
    assert not Memory.objects.filter(workspace=workspace, content="Dana likes short answers").exists()
    assert "reverted" in html_of(browser.get(BASE + "/proposals/?status=decided"))


def test_the_queue_costs_a_fixed_number_of_queries(
    browser: Client,
    workspace: Workspace,
    make_memory: Callable[..., Memory],
    django_assert_max_num_queries: Any,
) -> None:
    for i in range(30):
        memory = make_memory(f"stale note {i}", memory_type="episodic")
        summary_proposal(workspace, [memory], content=f"summary {i}")
        strategy_proposal(workspace, f"strategy rule {i}")
    proposals.proposal_reject(workspace=workspace, proposal_id=Proposal.objects.first().pk, actor=None)  # type: ignore[union-attr]
    with django_assert_max_num_queries(9):
        response = browser.get(BASE + "/proposals/")
    assert response.status_code == 200 and html_of(response).count('class="card proposal') == 50
    with django_assert_max_num_queries(9):
        assert browser.get(BASE + "/proposals/?status=decided").status_code == 200


# -- contradictions -------------------------------------------------------------------------------


def test_contradictions_show_both_sides_with_sources_and_dates(
    browser: Client, make_memory: Callable[..., Memory]
) -> None:
    first, second = state_conflict(make_memory)
    html = html_of(browser.get(BASE + "/contradictions/"))
    assert "The deploy pipeline is green" in html and "The deploy pipeline is red" in html
    assert "2 memories disagree" in html
    assert f'value="{first.id}"' in html and f'value="{second.id}"' in html
    assert html.count("<dt>Source</dt>") == 2 and html.count("<dt>Written</dt>") == 2


def test_keep_one_supersedes_the_other_and_reverts_exactly(
    browser: Client, make_memory: Callable[..., Memory], user: Any
) -> None:
    first, second = state_conflict(make_memory)
    ids = [str(first.id), str(second.id)]
    response = browser.post(
        BASE + "/contradictions/resolve/",
        {"ids": ids, "action": "keep_one", "keep": str(second.id), "note": "it went red at noon"},
        **hx("contradictions-body"),
    )
    assert response.status_code == 200
    html = html_of(response)
    assert "Kept one memory and superseded 1" in html and "No contradictions" in html
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, first.superseded_by) == (Status.SUPERSEDED, second.id)
    assert second.status == Status.ACTIVE and second.conflicts_with == []
    record = EvolutionRecord.objects.get(evolver=curation.CURATION_EVOLVER)
    assert record.actor == user and "it went red at noon" in record.reason
    browser.post(f"{BASE}/records/{record.pk}/revert/", {"next": BASE + "/contradictions/"})
    first.refresh_from_db()
    assert first.status == Status.ACTIVE and first.superseded_by is None
    assert "2 memories disagree" in html_of(browser.get(BASE + "/contradictions/"))


def test_keep_both_marks_the_contradiction_reviewed(browser: Client, make_memory: Callable[..., Memory]) -> None:
    first, second = state_conflict(make_memory)
    response = browser.post(
        BASE + "/contradictions/resolve/", {"ids": [str(first.id), str(second.id)], "action": "keep_both"}
    )
    assert response.status_code == 302
    first.refresh_from_db()
    assert first.status == Status.ACTIVE and first.conflicts_with == []
    assert first.metadata["contradiction_reviews"][0]["kept_with"] == [str(second.id)]
    html = html_of(browser.get(BASE + "/contradictions/"))
    assert "No contradictions" in html and "reviewed by alice" in html


def test_acting_on_a_stale_cluster_is_a_409(browser: Client, make_memory: Callable[..., Memory], user: Any) -> None:
    first, second = state_conflict(make_memory)
    ids = [str(first.id), str(second.id)]
    curation.contradiction_keep_both(workspace=first.workspace, ids=ids, actor=user)
    response = browser.post(BASE + "/contradictions/resolve/", {"ids": ids, "action": "keep_one", "keep": ids[0]})
    assert response.status_code == 409
    assert "no longer one contradiction" in html_of(response)


def test_editing_one_side_saves_it_as_the_persons_revertible_edit(
    browser: Client, make_memory: Callable[..., Memory]
) -> None:
    first, _ = state_conflict(make_memory)
    response = browser.post(f"{BASE}/contradictions/{first.id}/edit/", {"content": "The pipeline was green until noon"})
    assert response.status_code == 302
    first.refresh_from_db()
    assert first.content == "The pipeline was green until noon" and first.origin == "user:alice"
    assert EvolutionRecord.objects.filter(evolver="user", action="update", links__memory_id=first.id).exists()


# -- drift ----------------------------------------------------------------------------------------


def test_drift_shows_how_often_a_value_changed_with_its_timeline(
    browser: Client, workspace: Workspace, user: Any
) -> None:
    memory = drifting(workspace, user)
    html = html_of(browser.get(BASE + "/drift/"))
    assert "preference[editor]" in html and "changed 3x in last 30d" in html
    assert "Dana edits with helix" in html
    assert '<span class="before">Dana edits with nano</span> → <span class="after">Dana edits with helix</span>' in html
    assert f'id="drift-{memory.id}"' in html


def test_acknowledge_then_pin_are_recorded_and_a_third_time_is_a_409(
    browser: Client, workspace: Workspace, user: Any
) -> None:
    memory = drifting(workspace, user)
    url = f"{BASE}/drift/{memory.id}/acknowledge/"
    response = browser.post(url, **hx(f"drift-{memory.id}"))
    assert response.status_code == 200 and "acknowledged by alice" in html_of(response)
    memory.refresh_from_db()
    assert memory.drift_flags[0]["acknowledged_by"] == "alice" and not memory.pinned
    assert browser.post(url, {"pin": "true"}).status_code == 302
    memory.refresh_from_db()
    assert memory.pinned
    assert browser.post(url, {"pin": "true"}, **hx(f"drift-{memory.id}")).status_code == 409
    # The detector does not flag the acknowledged window again.
    services.evolution_run(workspace=workspace, actor=user, evolvers=["PreferenceDriftDetector"], dry_run=False)
    memory.refresh_from_db()
    assert len(memory.drift_flags) == 1


# -- runs -----------------------------------------------------------------------------------------


def archived_candidates(make_memory: Callable[..., Memory]) -> list[Memory]:
    """Episodic memories last touched 200 days ago: ExponentialDecay archives them."""
    old = timezone.now() - timedelta(days=200)
    made = [make_memory(f"Old episode {i}", memory_type="episodic") for i in range(2)]
    Memory.objects.filter(id__in=[m.id for m in made]).update(created_at=old, last_accessed=old)
    return made


def test_preview_lists_counts_and_before_after_then_apply_then_revert(
    browser: Client, workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    old = archived_candidates(make_memory)
    response = browser.post(BASE + "/runs/start/", {"evolvers": ["ExponentialDecay"], "mode": "preview"})
    preview = EvolutionRun.objects.get(dry_run=True)
    assert response["Location"] == f"{BASE}/runs/{preview.id}/"
    html = html_of(browser.get(response["Location"]))
    assert "What applying would change" in html
    counts = html[html.index('id="run-counts"') :]
    assert re.search(
        r"ExponentialDecay</td><td><span class=\"badge act act-archive\">archive</span></td>"
        r"<td class=\"num\">1</td><td class=\"num\">2</td>",
        counts,
    )
    assert '<code>status</code></td><td class="before">active</td><td class="after">archived</td>' in html
    assert all(f'href="/w/acme/memories/{m.id}/"' in html for m in old)
    assert Memory.objects.filter(id__in=[m.id for m in old], status=Status.ACTIVE).count() == 2

    applied = browser.post(f"{BASE}/runs/{preview.id}/apply/")
    run = EvolutionRun.objects.get(dry_run=False)
    assert applied["Location"] == f"{BASE}/runs/{run.id}/"
    assert Memory.objects.filter(id__in=[m.id for m in old], status=Status.ARCHIVED).count() == 2
    assert "Revert this run" in html_of(browser.get(applied["Location"]))

    browser.post(f"{BASE}/runs/{run.id}/revert/")
    run.refresh_from_db()
    assert run.status == RunStatus.REVERTED
    assert Memory.objects.filter(id__in=[m.id for m in old], status=Status.ACTIVE).count() == 2
    reverted = html_of(browser.get(f"{BASE}/runs/{run.id}/"))
    assert "Revert this run" not in reverted and ">reverted<" in reverted
    assert re.search(r'id="run-revert-done">in 1 transaction, the longest [0-9.]+ ms<', reverted)


def test_a_large_run_reverts_in_the_background_and_its_page_follows_the_revert(
    browser: Client, workspace: Workspace, make_memory: Callable[..., Memory], settings: Any
) -> None:
    old = archived_candidates(make_memory)
    run = services.evolution_run(workspace=workspace, actor=None, evolvers=["ExponentialDecay"], dry_run=False)
    records = EvolutionRecord.objects.filter(run=run).count()
    settings.EVOLUTION_REVERT_INLINE_RECORDS = 0
    settings.EVOLUTION_WORKER = "external"
    response = browser.post(f"{BASE}/runs/{run.id}/revert/")
    assert response["Location"] == f"{BASE}/runs/{run.id}/"
    html = html_of(browser.get(response["Location"]))
    assert f"Reverting the run in the background: {records} record{'' if records == 1 else 's'}, newest first." in html
    assert "Revert queued: waiting for a worker" in html
    # The page follows the revert as it follows a run, and offers no second revert meanwhile.
    assert f'ws-connect="/ws/workspaces/acme/evolution/runs/{run.id}/"' in html
    assert f'hx-get="{BASE}/runs/{run.id}/progress/"' in html
    assert 'id="run-revert"' not in html and "Revert this record" not in html
    assert Memory.objects.filter(id__in=[m.id for m in old], status=Status.ARCHIVED).count() == 2

    claimed = jobs.claim_revert(run.id, "w1")
    assert claimed is not None
    partial = html_of(browser.get(f"{BASE}/runs/{run.id}/progress/", **hx("run-body")))
    assert f"Reverting in the background: 0 of {records} records undone" in partial
    jobs.work_revert(claimed)
    done = html_of(browser.get(f"{BASE}/runs/{run.id}/"))
    assert ">reverted<" in done and "Reverting in the background" not in done
    assert "hx-get=" not in done.split('<section id="run-body"')[1].split(">")[0]
    assert Memory.objects.filter(id__in=[m.id for m in old], status=Status.ACTIVE).count() == 2


def test_one_record_of_a_run_reverts_alone(
    browser: Client, workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    archived_candidates(make_memory)
    run = services.evolution_run(workspace=workspace, actor=None, evolvers=["ExponentialDecay"], dry_run=False)
    record = EvolutionRecord.objects.get(run=run, action="archive")
    html = html_of(browser.get(f"{BASE}/runs/{run.id}/"))
    assert f'action="{BASE}/records/{record.pk}/revert/"' in html
    response = browser.post(f"{BASE}/records/{record.pk}/revert/", {"next": f"{BASE}/runs/{run.id}/"})
    assert response["Location"] == f"{BASE}/runs/{run.id}/"
    record.refresh_from_db()
    assert record.reverted_at is not None
    again = browser.post(f"{BASE}/records/{record.pk}/revert/", {"next": f"{BASE}/runs/{run.id}/"}, follow=True)
    assert "Not reverted" in html_of(again) and "already reverted" in html_of(again)


def test_unknown_or_no_evolvers_are_a_400_on_the_form(browser: Client) -> None:
    assert browser.post(BASE + "/runs/start/", {"mode": "preview"}).status_code == 400
    response = browser.post(BASE + "/runs/start/", {"evolvers": ["Nope"], "mode": "preview"})
    assert response.status_code == 400 and "Choose at least one" not in html_of(response)
    assert not EvolutionRun.objects.exists()


def test_a_running_run_polls_its_progress_partial(browser: Client, workspace: Workspace, user: Any) -> None:
    run = EvolutionRun.objects.create(
        workspace=workspace,
        evolvers=["ExponentialDecay", "HebbianCoRetrieval"],
        started_by=user,
        progress={"evolver": "HebbianCoRetrieval", "index": 1, "done": 1, "total": 2},
    )
    html = html_of(browser.get(f"{BASE}/runs/{run.id}/"))
    assert f'ws-connect="/ws/workspaces/acme/evolution/runs/{run.id}/"' in html
    assert f'hx-get="{BASE}/runs/{run.id}/progress/"' in html and "every 2s" in html
    partial = browser.get(f"{BASE}/runs/{run.id}/progress/", **hx("run-body"))
    body = html_of(partial)
    assert body.lstrip().startswith('<section id="run-body"') and "1 of 2 evolvers done" in body
    assert browser.get(f"{BASE}/runs/{run.id}/progress/")["Location"] == f"{BASE}/runs/{run.id}/"


def test_the_runs_list_costs_a_fixed_number_of_queries(
    browser: Client, workspace: Workspace, user: Any, django_assert_max_num_queries: Any
) -> None:
    for _ in range(12):
        services.evolution_run(workspace=workspace, actor=user, evolvers=["ExponentialDecay"], dry_run=True)
    # One of them reads the workspace's scheduled jobs (the table under the schedules), one counts the memories
    # waiting for a vector.
    with django_assert_max_num_queries(8):
        response = browser.get(BASE + "/runs/")
    assert html_of(response).count('<tr id="run-') == 12


def test_a_failed_evolver_shows_its_error(browser: Client, workspace: Workspace, user: Any) -> None:
    workspace.evolution_settings = {"ExponentialDecay": {"archive_threshold": "high"}}
    workspace.save()
    run = services.evolution_run(workspace=workspace, actor=user, evolvers=["ExponentialDecay"], dry_run=True)
    html = html_of(browser.get(f"{BASE}/runs/{run.id}/"))
    assert "o-failed" in html and "archive_threshold" in html
    assert "archive_threshold" in html_of(browser.get(BASE + "/runs/"))


@pytest.mark.django_db(transaction=True)
def test_a_page_started_run_works_in_the_background_and_finishes(
    workspace: Workspace, user: Any, make_memory: Callable[..., Memory], settings: Any
) -> None:
    settings.EVOLUTION_WORKER = "thread"
    archived_candidates(make_memory)
    client = Client()
    client.force_login(user)
    response = client.post(BASE + "/runs/start/", {"evolvers": ["ExponentialDecay"], "mode": "preview"})
    run = EvolutionRun.objects.get()
    assert response["Location"] == f"{BASE}/runs/{run.id}/"
    deadline = time.monotonic() + 60
    while run.status in (RunStatus.QUEUED, RunStatus.RUNNING) and time.monotonic() < deadline:
        time.sleep(0.05)
        run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED and run.summary["counts"]["records"] == 1
    assert run.worker and any(t.name == "evolution-worker" for t in threading.enumerate())
    jobs.stop_thread_worker(timeout=10)


# -- the progress socket --------------------------------------------------------------------------


@pytest.fixture
def in_memory_layer(settings: Any) -> Iterator[None]:
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    yield


def _communicator(user: Any, run_id: uuid.UUID, slug: str = "acme") -> WebsocketCommunicator:
    from django.urls import path

    app = URLRouter([path("ws/workspaces/<slug:ws>/evolution/runs/<uuid:run_id>/", RunProgressConsumer.as_asgi())])
    communicator = WebsocketCommunicator(app, f"/ws/workspaces/{slug}/evolution/runs/{run_id}/")
    communicator.scope["user"] = user
    communicator.scope["cookies"] = {"csrftoken": "s" * 32}
    return communicator


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_the_socket_pushes_the_run_body_to_members_only(
    in_memory_layer: None, workspace: Workspace, user: Any
) -> None:
    from asgiref.sync import sync_to_async
    from django.contrib.auth import get_user_model
    from django.db import connections

    run = await sync_to_async(EvolutionRun.objects.create)(
        workspace=workspace,
        evolvers=["ExponentialDecay"],
        progress={"evolver": "ExponentialDecay", "done": 0, "total": 1},
    )
    stranger = await sync_to_async(get_user_model().objects.create_user)("eve", password="pw-eve")
    refused = _communicator(stranger, run.id)
    connected, code = await refused.connect()
    assert not connected and code == 4404

    communicator = _communicator(user, run.id)
    connected, _ = await communicator.connect()
    assert connected
    first = await communicator.receive_from(timeout=30)
    assert '<section id="run-body"' in first
    assert "0 of 1 evolvers done" in first

    run.status = RunStatus.COMPLETED
    run.progress = {"evolver": "", "done": 1, "total": 1}
    await sync_to_async(run.save)()
    layer = get_channel_layer()
    assert layer is not None
    await layer.group_send(
        workspace_group(workspace.pk),
        {"type": "workspace.event", "event": PROGRESS_EVENT, "payload": {"run_id": str(run.id), "status": "completed"}},
    )
    pushed = await communicator.receive_from(timeout=30)
    assert "What applying would change" in pushed and 'value="' + "s" * 32 + '"' in pushed
    await layer.group_send(
        workspace_group(workspace.pk),
        {"type": "workspace.event", "event": PROGRESS_EVENT, "payload": {"run_id": str(uuid.uuid4())}},
    )
    assert await communicator.receive_nothing(timeout=0.3)
    await communicator.disconnect()
    # The consumer's ORM calls ran in asgiref's thread: close its connection so the test database can be dropped.
    await sync_to_async(connections.close_all)()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_the_socket_follows_a_background_revert_to_its_end(
    in_memory_layer: None, workspace: Workspace, user: Any, make_memory: Callable[..., Memory], settings: Any
) -> None:
    """The worker's revert announces its progress as a run does: the page's socket pushes the body until the
    run shows reverted."""
    from asgiref.sync import sync_to_async
    from django.db import connections

    settings.EVOLUTION_REVERT_INLINE_RECORDS = 0
    settings.EVOLUTION_WORKER = "external"

    def queued_revert() -> EvolutionRun:
        archived_candidates(make_memory)
        run = services.evolution_run(workspace=workspace, actor=user, evolvers=["ExponentialDecay"], dry_run=False)
        assert services.run_revert_request(workspace=workspace, run=run, actor=user).queued
        return run

    run = await sync_to_async(queued_revert)()
    communicator = _communicator(user, run.id)
    connected, _ = await communicator.connect()
    assert connected
    first = await communicator.receive_from(timeout=30)
    assert "Revert queued: waiting for a worker" in first
    assert await sync_to_async(jobs.work_available)("w1") == 1
    pushed = [await communicator.receive_from(timeout=30)]
    while ">reverted<" not in pushed[-1] and len(pushed) < 5:
        pushed.append(await communicator.receive_from(timeout=30))
    assert ">reverted<" in pushed[-1] and "Revert queued" not in pushed[-1]
    await communicator.disconnect()
    await sync_to_async(connections.close_all)()


# -- engine ---------------------------------------------------------------------------------------


def test_the_engine_page_shows_the_world_model(browser: Client, workspace: Workspace) -> None:
    for result in ("success", "success", "fail"):
        engine.outcome_record(workspace=workspace, item=engine_inputs.OutcomeInput(task_type="deploy", result=result))
    html = html_of(browser.get(BASE + "/engine/"))
    table = html[html.index('id="world-model"') :]
    assert re.search(
        r"<td>deploy</td><td class=\"num\">2</td><td class=\"num\">1</td><td class=\"num\">0.67</td>", table
    )


def test_engine_evolve_from_the_page_proposes_a_strategy(browser: Client, workspace: Workspace) -> None:
    now = timezone.now()
    for days in (3, 2, 1):
        Outcome.objects.create(
            workspace=workspace,
            task_type="packaging",
            result="fail",
            lesson="Always check asarUnpack for renderer files",
            created_at=now - timedelta(days=days),
        )
    response = browser.post(BASE + "/engine/evolve/", follow=True)
    assert "1 new proposal(s)" in html_of(response)
    assert Proposal.objects.filter(workspace=workspace, kind="strategy", status="pending").count() == 1


def test_dream_preview_stores_nothing_and_dream_now_shows_its_report(
    browser: Client, workspace: Workspace, user: Any
) -> None:
    memory_services.memory_create(
        workspace=workspace,
        actor=user,
        item=MemoryInput(content="Keep PRs small", memory_type="strategy", tier="hot"),
    )
    preview = browser.post(BASE + "/engine/dream/", {"dry_run": "true"})
    assert preview.status_code == 200 and "Dream preview" in html_of(preview)
    assert not DreamReport.objects.exists()
    response = browser.post(BASE + "/engine/dream/")
    report = DreamReport.objects.get()
    assert response["Location"] == f"{BASE}/engine/dream/{report.pk}/"
    html = html_of(browser.get(response["Location"]))
    assert "Dream report" in html and "rules and corrections scored" in html


def test_export_downloads_a_zip_that_imports_into_another_workspace(
    browser: Client, workspace: Workspace, user: Any
) -> None:
    memory_services.memory_create(
        workspace=workspace, actor=user, item=MemoryInput(content="Keep PRs small", memory_type="strategy", tier="hot")
    )
    response = browser.get(BASE + "/engine/export.zip")
    assert response["Content-Type"] == "application/zip"
    assert 'filename="memory-evolution-acme.zip"' in response["Content-Disposition"]
    data = b"".join(response.streaming_content) if response.streaming else response.content
    assert "memory-evolution/hot/memory.md" in zipfile.ZipFile(io.BytesIO(data)).namelist()
    memory_services.workspace_create(owner=user, slug="copy", name="Copy")
    upload = io.BytesIO(data)
    upload.name = "export.zip"
    done = browser.post("/w/copy/evolution/engine/import/", {"file": upload}, follow=True)
    assert "Imported" in html_of(done)
    copy = Workspace.objects.get(slug="copy")
    assert Memory.objects.filter(workspace=copy, content="Keep PRs small", tier="hot").exists()


def test_a_malformed_import_lists_every_problem_with_file_and_line_and_imports_nothing(
    browser: Client, workspace: Workspace
) -> None:
    files = {"hot/memory.md": "# Hot memory\n\n- fine\n### too deep\n", "engine/sensor.json": "{not json"}
    upload = io.BytesIO(memdir_export.memdir_zip(files))
    upload.name = "bad.zip"
    response = browser.post(BASE + "/engine/import/", {"file": upload})
    assert response.status_code == 400
    html = html_of(response)
    assert "Nothing was imported: 2 problems" in html
    assert "<code>hot/memory.md:4</code>" in html and "<code>engine/sensor.json:1</code>" in html
    assert not Memory.objects.filter(workspace=workspace).exists()
    not_zip = io.BytesIO(b"not a zip")
    not_zip.name = "x.zip"
    bad = browser.post(BASE + "/engine/import/", {"file": not_zip})
    assert bad.status_code == 400 and "not a zip archive" in html_of(bad)


def test_a_viewer_reads_the_engine_and_a_member_role_change_shows_buttons(
    viewer_browser: Client, viewer: Any, workspace: Workspace
) -> None:
    assert ">Run engine evolve" not in html_of(viewer_browser.get(BASE + "/engine/"))
    memory_services.membership_set(workspace=workspace, user=viewer, role=Role.EDITOR)
    assert ">Run engine evolve" in html_of(viewer_browser.get(BASE + "/engine/"))


def test_the_runs_page_shows_and_edits_the_workspace_schedule(
    browser: Client, viewer_browser: Client, workspace: Workspace
) -> None:
    assert "No scheduled cycle" in html_of(browser.get(BASE + "/runs/"))
    saved = browser.post(BASE + "/runs/schedule/", {"hours": "12"})
    assert saved.status_code == 302
    workspace.refresh_from_db()
    assert workspace.evolution_settings["cycle_every_hours"] == 12.0
    assert "every <strong>12 h</strong>" in html_of(browser.get(BASE + "/runs/"))
    refused = browser.post(BASE + "/runs/schedule/", {"hours": "soon"})
    assert refused.status_code == 400 and "is not a number" in html_of(refused)
    too_long = browser.post(BASE + "/runs/schedule/", {"hours": "100000"})
    assert too_long.status_code == 400 and "cycle_every_hours" in html_of(too_long)
    assert viewer_browser.post(BASE + "/runs/schedule/", {"hours": "0"}).status_code in (403, 404)
    workspace.refresh_from_db()
    assert workspace.evolution_settings["cycle_every_hours"] == 12.0
    assert browser.post(BASE + "/runs/schedule/", {"hours": "0"}).status_code == 302
    assert "No scheduled cycle" in html_of(browser.get(BASE + "/runs/"))


def test_a_queued_run_page_offers_cancel_and_cancelling_ends_it(
    browser: Client, viewer_browser: Client, workspace: Workspace, settings: Any
) -> None:
    settings.EVOLUTION_WORKER = "external"
    response = browser.post(BASE + "/runs/start/", {"evolvers": ["ExponentialDecay"], "mode": "preview"})
    run = EvolutionRun.objects.get()
    page = html_of(browser.get(response["Location"]))
    assert run.status == RunStatus.QUEUED and "Queued: waiting for a worker" in page and 'id="run-cancel"' in page
    assert 'id="run-cancel"' not in html_of(viewer_browser.get(response["Location"]))
    assert viewer_browser.post(f"{BASE}/runs/{run.id}/cancel/").status_code in (403, 404)
    assert browser.post(f"{BASE}/runs/{run.id}/cancel/").status_code == 302
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    again = browser.post(f"{BASE}/runs/{run.id}/cancel/", follow=True)
    assert "Not cancelled" in html_of(again)
