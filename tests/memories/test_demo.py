"""The demo loader: the "why did we pick JWT" story, created once, with an admin whose password is shown once."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone

from memories.demo import demo_load
from memories.models import Edge, EdgeType, Membership, Memory, MemoryType, Role, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def load(*args: str) -> str:
    out = StringIO()
    call_command("load_demo", *args, stdout=out)
    return out.getvalue()


def find(text: str) -> Memory:
    return Memory.objects.get(workspace__slug="demo", content__contains=text)


def test_the_demo_tells_the_jwt_decision_story() -> None:
    demo_load()
    workspace = Workspace.objects.get(slug="demo")
    decision = find("we picked JWT access tokens")
    assert decision.memory_type == MemoryType.DECISION
    balancer = find("load balancer in front of the API")
    incident = find("logged out at random")
    rfc = find("RFC 7519 defines JSON Web Token")
    edges = set(Edge.objects.filter(workspace=workspace).values_list("source_id", "target_id", "edge_type"))
    assert (decision.id, balancer.id, EdgeType.RELATED) in edges
    assert (decision.id, incident.id, EdgeType.DERIVED_FROM) in edges
    assert (decision.id, rfc.id, EdgeType.RELATED) in edges


def test_the_demo_has_changing_preferences_a_fulfilled_goal_and_old_episodes() -> None:
    demo_load()
    now = timezone.now()
    preferences = list(
        Memory.objects.filter(workspace__slug="demo", memory_type=MemoryType.PREFERENCE, subject="dana-editor")
    )
    # Write-time policies may fold older preferences into the newest; the four arrivals stay distinct in time.
    assert len({p.created_at for p in preferences}) == 4
    assert max(p.created_at for p in preferences) - min(p.created_at for p in preferences) > timedelta(days=20)
    assert {"Neovim", "Zed"} <= {word for p in preferences for word in p.content.split()}
    goal = Memory.objects.get(workspace__slug="demo", memory_type=MemoryType.GOAL)
    fulfilled = Edge.objects.get(target=goal, edge_type=EdgeType.RESOLVES).source
    assert fulfilled.memory_type == MemoryType.EVENT and fulfilled.created_at > goal.created_at
    old = Memory.objects.filter(
        workspace__slug="demo", memory_type=MemoryType.EPISODIC, created_at__lt=now - timedelta(days=90)
    )
    assert old.count() >= 3


def test_the_demo_conversation_is_ingested_as_a_graph() -> None:
    demo_load()
    turns = Memory.objects.filter(workspace__slug="demo", memory_type=MemoryType.EPISODIC, metadata__has_key="speaker")
    assert turns.count() == 7
    assert Memory.objects.filter(workspace__slug="demo", memory_type=MemoryType.SESSION).count() == 2
    assert Edge.objects.filter(workspace__slug="demo", edge_type=EdgeType.FOLLOWS).count() == 5
    assert Edge.objects.filter(workspace__slug="demo", edge_type=EdgeType.PART_OF, source__in=turns).count() == 7
    redis = Memory.objects.get(workspace__slug="demo", memory_type=MemoryType.ENTITY, subject="redis")
    assert Edge.objects.filter(target=redis, edge_type=EdgeType.MENTIONS).count() >= 2


def test_loading_twice_changes_nothing() -> None:
    first = demo_load()
    counts = (Memory.objects.count(), Edge.objects.count(), get_user_model().objects.count())
    second = demo_load()
    assert (first.created_workspace, second.created_workspace) == (True, False)
    assert (Memory.objects.count(), Edge.objects.count(), get_user_model().objects.count()) == counts
    assert (second.memories, second.edges) == (first.memories, first.edges)
    assert second.token != first.token  # a new key each time: the stored ones are hashes


def test_the_admin_password_is_printed_once_and_works() -> None:
    output = load()
    assert "Demo workspace 'demo' created" in output
    line = next(line for line in output.splitlines() if "Password (shown once):" in line)
    password = line.rsplit(" ", 1)[1]
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.is_staff
    assert admin.check_password(password)
    assert Membership.objects.get(user=admin, workspace__slug="demo").role == Role.OWNER
    again = load()
    assert "already exists" in again
    assert "Password" not in again and password not in again


def test_the_api_token_is_the_last_word_of_the_output() -> None:
    from rest_framework.test import APIClient

    token = load().split()[-1]
    again = load().split()[-1]
    for key in (token, again):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        assert client.get("/api/v1/workspaces/demo/memories/").status_code == 200


def test_an_admin_recreated_later_owns_the_existing_demo() -> None:
    demo_load()
    get_user_model().objects.filter(username="admin").delete()
    result = demo_load()
    assert result.password is not None
    assert Membership.objects.get(user__username="admin", workspace__slug="demo").role == Role.OWNER


def test_slug_and_username_can_be_chosen() -> None:
    output = load("--slug", "story", "--username", "root")
    assert "'story'" in output
    assert Membership.objects.get(user__username="root", workspace__slug="story").role == Role.OWNER
