"""The proposal queue page for merge, promotion and reflection proposals: rationale, linked sources, the
before/after preview, modify then approve, and a bounded number of queries."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from evolution.models import Proposal, ProposalStatus
from evolution.proposals import proposal_create
from memories.models import Memory, Status, Workspace

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


def html_of(response: Any) -> str:
    return str(response.content.decode())


def card_of(html: str, proposal: Proposal) -> str:
    start = html.index(f'id="proposal-{proposal.pk}"')
    end = html.find("</article>", start)
    return html[start:end]


# -- merge ----------------------------------------------------------------------------------------


def merge_group(kit: Any, n: int = 2, prefix: str = "The deploy runs on Fridays") -> tuple[Proposal, list[Memory]]:
    rows = [
        kit.mem(f"{prefix}{'!' * k}", tags=[f"t{k}"], retention_score=0.3 + 0.1 * k, age_days=5 - k) for k in range(n)
    ]
    kit.run("DuplicateMerger")
    proposal = Proposal.objects.filter(workspace=kit.workspace, kind="merge").order_by("-id").first()
    assert proposal is not None
    return proposal, rows


def test_a_merge_card_shows_its_rationale_linked_sources_and_the_before_after_of_each_memory(
    browser: Client, kit: Any
) -> None:
    proposal, (keep, other) = merge_group(kit)
    card = card_of(html_of(browser.get(BASE + "/proposals/")), proposal)
    assert "say the same thing" in card and "identical text" in card
    for memory in (keep, other):
        assert f'href="/w/acme/memories/{memory.id}/"' in card
    assert "<code>status</code>" in card and "superseded" in card
    assert "<code>superseded_by</code>" in card
    assert "<code>tags</code>" in card and "t0, t1" in card
    assert "<code>retention_score</code>" in card
    assert "Nothing is deleted" in card


def test_a_merge_whose_memory_was_archived_since_warns_before_approval(browser: Client, kit: Any) -> None:
    proposal, (_, other) = merge_group(kit)
    Memory.objects.filter(pk=other.pk).update(status=Status.ARCHIVED)
    card = card_of(html_of(browser.get(BASE + "/proposals/")), proposal)
    assert "is archived now: approving will be refused" in card


def test_approving_a_merge_on_the_page_supersedes_the_duplicate(browser: Client, kit: Any) -> None:
    proposal, (keep, other) = merge_group(kit)
    response = browser.post(f"{BASE}/proposals/{proposal.pk}/approve/", **hx(f"proposal-{proposal.pk}"))
    assert response.status_code == 200 and "approved" in html_of(response)
    other.refresh_from_db()
    assert other.status == Status.SUPERSEDED and other.superseded_by == keep.id


def test_modify_then_approve_a_merge_offers_the_group_and_applies_the_chosen_memory(browser: Client, kit: Any) -> None:
    proposal, (a, b, c) = merge_group(kit, n=3)
    form = html_of(browser.get(f"{BASE}/proposals/{proposal.pk}/modify/", **hx(f"proposal-{proposal.pk}")))
    assert form.count('type="radio"') == 3 and form.count('type="checkbox"') == 3
    prefix = f"p{proposal.pk}"
    response = browser.post(
        f"{BASE}/proposals/{proposal.pk}/modify/",
        {f"{prefix}-keep": str(c.id), f"{prefix}-merge": [str(a.id), str(c.id)]},
    )
    assert response.status_code == 302
    proposal.refresh_from_db()
    assert proposal.status == ProposalStatus.MODIFIED
    a.refresh_from_db()
    b.refresh_from_db()
    assert a.superseded_by == c.id and b.status == Status.ACTIVE


def test_modify_a_merge_with_nothing_left_to_merge_is_refused(browser: Client, kit: Any) -> None:
    proposal, (a, _) = merge_group(kit)
    prefix = f"p{proposal.pk}"
    response = browser.post(
        f"{BASE}/proposals/{proposal.pk}/modify/", {f"{prefix}-keep": str(a.id), f"{prefix}-merge": [str(a.id)]}
    )
    assert response.status_code == 400 and "Choose at least one other memory" in html_of(response)
    proposal.refresh_from_db()
    assert proposal.status == ProposalStatus.PENDING


def test_a_queue_of_merge_proposals_costs_a_fixed_number_of_queries(
    browser: Client, kit: Any, django_assert_max_num_queries: Any
) -> None:
    for k in range(12):
        merge_group(kit, prefix=f"note number {k} about deploys")
    assert Proposal.objects.filter(kind="merge").count() == 12
    with django_assert_max_num_queries(9):
        response = browser.get(BASE + "/proposals/")
    assert html_of(response).count('class="card proposal k-merge') == 12


# -- reflection and promotion ---------------------------------------------------------------------


def reflection_proposal(workspace: Workspace) -> Proposal:
    proposal, _ = proposal_create(
        workspace=workspace,
        kind="reflection",
        title="Reflect on deploy",
        rationale="The dream noticed this in the outcomes of the last 7 days (2 readings).",
        payload={
            "pattern": "issue:disk full",
            "context": "deploy",
            "reflection": "The issue 'disk full' made 2 tasks fail in the last 7 days.",
            "lesson": "When 'disk full' comes up: prune old images",
            "evidence": ["sensor:S-0001", "sensor:S-0002"],
        },
        created_by="Dream",
    )
    return proposal


def promotion_proposal(kit: Any, target: Memory | None = None) -> tuple[Proposal, list[Memory]]:
    sources = [
        kit.mem(f"CONTEXT: ci\nREFLECTION: r{k}\nLESSON: Pin images", memory_type="reflection") for k in range(3)
    ]
    proposal, _ = proposal_create(
        workspace=kit.workspace,
        kind="promotion",
        title="Promote to HOT: Pin images",
        rationale="The lesson 'Pin images' appears in 3 reflections within 7 days.",
        payload={
            "key": "strategy:abc",
            "rule": "Pin images",
            "task_type": "ci",
            "evidence": [f"reflection:{m.id}" for m in sources],
            "reflections": [str(m.id) for m in sources],
            "target": str(target.id) if target is not None else None,
            "target_tier": target.tier if target is not None else None,
        },
        source_ids=[m.id for m in sources],
        dedupe_key="promotion:strategy:abc",
        created_by="Dream",
    )
    return proposal, sources


def test_a_reflection_card_shows_the_three_lines_it_would_log_and_its_evidence(browser: Client, kit: Any) -> None:
    proposal = reflection_proposal(kit.workspace)
    card = card_of(html_of(browser.get(BASE + "/proposals/")), proposal)
    assert "The dream noticed this" in card
    assert "<code>sensor:S-0001</code>" in card
    assert 'New <span class="badge t-reflection">reflection</span> memory' in card
    assert "CONTEXT: deploy<br>REFLECTION: The issue &#x27;disk full&#x27; made 2 tasks fail" in card
    assert "LESSON: When &#x27;disk full&#x27; comes up: prune old images" in card


def test_modify_then_approve_a_reflection_logs_the_reviewer_s_lines(browser: Client, kit: Any) -> None:
    proposal = reflection_proposal(kit.workspace)
    form = html_of(browser.get(f"{BASE}/proposals/{proposal.pk}/modify/", **hx(f"proposal-{proposal.pk}")))
    assert "Lesson" in form and "prune old images" in form
    prefix = f"p{proposal.pk}"
    response = browser.post(
        f"{BASE}/proposals/{proposal.pk}/modify/",
        {
            f"{prefix}-context": "deploy",
            f"{prefix}-reflection": "Disk filled twice",
            f"{prefix}-lesson": "Alert at 80%",
        },
    )
    assert response.status_code == 302
    memory = Memory.objects.get(workspace=kit.workspace, memory_type="reflection", origin="user:alice")
    assert memory.content == "CONTEXT: deploy\nREFLECTION: Disk filled twice\nLESSON: Alert at 80%"


def test_a_promotion_card_links_its_reflections_and_shows_the_new_hot_rule(browser: Client, kit: Any) -> None:
    proposal, sources = promotion_proposal(kit)
    card = card_of(html_of(browser.get(BASE + "/proposals/")), proposal)
    assert "appears in 3 reflections within 7 days" in card
    for source in sources:
        assert f'href="/w/acme/memories/{source.id}/"' in card
    assert 'New <span class="badge t-strategy">strategy</span> memory' in card
    assert "HOT (always loaded)" in card and "DERIVED_FROM each of the 3 source reflections" in card


def test_a_promotion_of_an_existing_warm_rule_shows_its_tier_before_and_after(browser: Client, kit: Any) -> None:
    warm = kit.mem("pin images", memory_type="strategy", tier="warm")
    proposal, _ = promotion_proposal(kit, target=warm)
    card = card_of(html_of(browser.get(BASE + "/proposals/")), proposal)
    assert f'href="/w/acme/memories/{warm.id}/"' in card
    assert '<code>tier</code></td><td class="before">warm</td><td class="after">hot</td>' in card


def test_modify_then_approve_a_promotion_makes_the_reviewer_s_hot_rule(browser: Client, kit: Any) -> None:
    proposal, _ = promotion_proposal(kit)
    prefix = f"p{proposal.pk}"
    response = browser.post(
        f"{BASE}/proposals/{proposal.pk}/modify/", {f"{prefix}-rule": "Pin images by digest", f"{prefix}-task_type": ""}
    )
    assert response.status_code == 302
    rule = Memory.objects.get(workspace=kit.workspace, memory_type="strategy")
    assert (rule.content, rule.tier, rule.origin) == ("Pin images by digest", "hot", "user:alice")


def test_a_queue_of_every_new_kind_costs_a_fixed_number_of_queries(
    browser: Client, kit: Any, django_assert_max_num_queries: Any
) -> None:
    for k in range(5):
        merge_group(kit, prefix=f"mixed note {k}")
        reflection_proposal(kit.workspace)
    promotion_proposal(kit, target=kit.mem("pin images", memory_type="strategy", tier="warm"))
    with django_assert_max_num_queries(9):
        response = browser.get(BASE + "/proposals/")
    html = html_of(response)
    assert html.count("k-merge") == 5 and html.count("k-reflection") == 5 and html.count("k-promotion") == 1
