"""REST: creating and listing workspaces."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from memories.models import Membership, Role, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]

URL = "/api/v1/workspaces/"


def test_creating_a_workspace_makes_the_caller_its_owner(api: APIClient, user: Any) -> None:
    response = api.post(URL, {"slug": "team-a", "name": "Team A"}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    workspace = Workspace.objects.get(slug="team-a")
    assert body["id"] == workspace.pk
    assert (body["slug"], body["name"], body["role"]) == ("team-a", "Team A", "owner")
    assert Membership.objects.get(workspace=workspace, user=user).role == Role.OWNER


def test_the_list_shows_only_the_callers_workspaces_with_their_roles(
    api: APIClient, workspace: Workspace, other_workspace: Workspace, make_user: Callable[..., Any], user: Any
) -> None:
    from memories import services

    shared = services.workspace_create(owner=make_user("bob"), slug="shared", name="Shared")
    services.membership_set(workspace=shared, user=user, role=Role.VIEWER)
    response = api.get(URL)
    assert response.status_code == 200
    assert response.json()["results"] == [
        {"id": workspace.pk, "slug": "acme", "name": "Acme", "role": "owner"},
        {"id": shared.pk, "slug": "shared", "name": "Shared", "role": "viewer"},
    ]


def test_a_slug_taken_by_a_workspace_of_others_is_only_unavailable_with_a_free_one_offered(
    api: APIClient, other_workspace: Workspace
) -> None:
    response = api.post(URL, {"slug": "other", "name": "Mine now"}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert (body["error"], body["field"]) == ("slug_unavailable", "slug")
    assert set(body) == {"error", "detail", "field"}
    assert "workspace" not in body["detail"] and "exists" not in body["detail"]
    suggested = re.fullmatch(r"slug: 'other' is not available; '(other-[0-9a-f]{6})' is", body["detail"])
    assert suggested, body["detail"]
    assert Workspace.objects.get(slug="other").name == "Other"
    again = api.post(URL, {"slug": suggested.group(1), "name": "Mine now"}, format="json")
    assert again.status_code == 201, again.content


def test_a_non_member_gets_the_same_answer_whoever_holds_the_slug(
    api: APIClient, other_workspace: Workspace, make_user: Callable[..., Any]
) -> None:
    from memories import services

    services.workspace_create(owner=make_user("bob"), slug="bobs", name="Bob's")
    answers = [api.post(URL, {"slug": slug, "name": "x"}, format="json") for slug in ("other", "bobs")]
    shapes = [(a.status_code, a.json()["error"], re.sub(r"'[^']*'", "'…'", a.json()["detail"])) for a in answers]
    assert shapes[0] == shapes[1]


@pytest.mark.parametrize("role", [Role.OWNER, Role.VIEWER])
def test_a_member_is_told_the_slug_is_a_workspace_of_theirs(
    api: APIClient, user: Any, other_workspace: Workspace, role: str
) -> None:
    from memories import services

    services.membership_set(workspace=other_workspace, user=user, role=role)
    response = api.post(URL, {"slug": "other", "name": "Again"}, format="json")
    assert response.status_code == 409
    body = response.json()
    assert (body["error"], body["field"]) == ("slug_taken", "slug")
    assert body["detail"] == "slug: you are already a member of the workspace 'other'"


def test_a_suggested_slug_fits_the_slug_length(api: APIClient, make_user: Callable[..., Any]) -> None:
    from memories import services

    long_slug = "s" * 64
    services.workspace_create(owner=make_user("bob"), slug=long_slug, name="Long")
    detail = api.post(URL, {"slug": long_slug, "name": "x"}, format="json").json()["detail"]
    suggestion = detail.rsplit("'", 2)[-2]
    assert len(suggestion) <= 64 and suggestion.startswith("s" * 57 + "-")
    assert api.post(URL, {"slug": suggestion, "name": "x"}, format="json").status_code == 201


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"name": "No slug"}, "slug"),
        ({"slug": "Not a slug!", "name": "x"}, "slug"),
        ({"slug": "s" * 65, "name": "x"}, "slug"),
        ({"slug": "fine"}, "name"),
        ({"slug": "fine", "name": ""}, "name"),
        ({"slug": "fine", "name": "n" * 201}, "name"),
    ],
)
def test_bad_workspace_input_names_the_field(api: APIClient, user: Any, payload: dict[str, Any], field: str) -> None:
    response = api.post(URL, payload, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid"
    assert body["field"] == field
    assert field in body["detail"]
    assert not Workspace.objects.exists()


def test_a_body_that_is_not_an_object_is_refused_as_body(api: APIClient, user: Any) -> None:
    response = api.post(URL, ["slug", "name"], format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "body"


def test_workspaces_need_an_authenticated_caller(workspace: Workspace) -> None:
    client = APIClient()
    assert client.get(URL).status_code == 401
    assert client.post(URL, {"slug": "x", "name": "x"}, format="json").status_code == 401
    bad_token = APIClient()
    bad_token.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    response = bad_token.get(URL)
    assert response.status_code == 401
    assert set(response.json()) >= {"error", "detail"}
