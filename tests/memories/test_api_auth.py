"""Token authentication: DRF's rules (header, messages, inactive users, 401 challenge) on one raw query,
hashed keys, expiry and revocation, and the rate limit on failures."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from memories.models import ApiToken, Workspace
from memories.tokens import api_token_create, api_tokens_revoke, token_digest

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def _get(token: str | None, slug: str) -> Any:
    client = APIClient()
    if token is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client.get(f"/api/v1/workspaces/{slug}/settings/")


def test_a_valid_token_authenticates_its_user_with_two_queries(user: Any, workspace: Workspace) -> None:
    token = api_token_create(user=user)
    with CaptureQueriesContext(connection) as queries:
        response = _get(token.key, workspace.slug)
    assert response.status_code == 200, response.content
    # the user by token, then the workspace with the caller's role: one query each
    assert len(queries) == 2, [q["sql"] for q in queries]


@pytest.mark.parametrize(
    "header, error, detail",
    [
        (None, "not_authenticated", "Authentication credentials were not provided."),
        ("not-a-token", "authentication_failed", "Invalid token."),
        ("", "authentication_failed", "Invalid token header. No credentials provided."),
    ],
)
def test_a_missing_or_unknown_token_is_a_401_with_a_challenge(
    user: Any, workspace: Workspace, header: str | None, error: str, detail: str
) -> None:
    response = _get(header, workspace.slug)
    assert response.status_code == 401
    assert response.json() == {"error": error, "detail": detail}
    assert response["WWW-Authenticate"] == "Token"


def test_the_token_of_an_inactive_user_is_refused(user: Any, workspace: Workspace) -> None:
    token = api_token_create(user=user)
    user.is_active = False
    user.save(update_fields=["is_active"])
    response = _get(token.key, workspace.slug)
    assert response.status_code == 401
    assert response.json() == {"error": "authentication_failed", "detail": "User inactive or deleted."}


def test_a_deleted_token_stops_working_at_once(user: Any, workspace: Workspace) -> None:
    token = api_token_create(user=user)
    assert _get(token.key, workspace.slug).status_code == 200
    token.token.delete()
    assert _get(token.key, workspace.slug).status_code == 401


def test_a_token_sees_only_its_user_workspaces(
    user: Any, workspace: Workspace, other_workspace: Workspace, member: Any
) -> None:
    viewer = member("viewer")
    token = api_token_create(user=viewer)
    assert _get(token.key, workspace.slug).status_code == 200
    response = _get(token.key, other_workspace.slug)
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_failed_token_checks_past_the_rate_are_a_429_before_any_lookup(
    settings: Any, user: Any, workspace: Workspace
) -> None:
    settings.THROTTLE_RATES = {**settings.THROTTLE_RATES, "token_failure": (4, 60)}
    token = api_token_create(user=user)
    assert [_get(f"guess-{i}", workspace.slug).status_code for i in range(4)] == [401] * 4
    with CaptureQueriesContext(connection) as queries:
        refused = _get(token.key, workspace.slug)  # even the right token waits: the guesser could be anyone here
    assert refused.status_code == 429
    assert refused.json()["error"] == "throttled"
    assert "failed token checks" in refused.json()["detail"]
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert len(queries) == 0
    other = APIClient(REMOTE_ADDR="10.1.1.1")
    other.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    assert other.get(f"/api/v1/workspaces/{workspace.slug}/settings/").status_code == 200


def test_valid_tokens_never_count_as_failures(settings: Any, user: Any, workspace: Workspace) -> None:
    settings.THROTTLE_RATES = {**settings.THROTTLE_RATES, "token_failure": (2, 60)}
    token = api_token_create(user=user)
    assert all(_get(token.key, workspace.slug).status_code == 200 for _ in range(10))
    assert _get("guess", workspace.slug).status_code == 401


def test_only_the_hash_of_a_key_is_stored(user: Any, workspace: Workspace) -> None:
    issued = api_token_create(user=user, name="ci")
    stored = ApiToken.objects.get(pk=issued.token.pk)
    assert len(issued.key) == 40 and stored.digest == token_digest(issued.key) != issued.key
    assert stored.prefix == issued.key[:8]
    assert not ApiToken.objects.filter(digest=issued.key).exists()
    assert _get(issued.key, workspace.slug).status_code == 200
    assert _get(stored.digest, workspace.slug).status_code == 401  # the stored hash is no key


def test_a_revoked_token_stops_working_at_once_and_says_so(user: Any, workspace: Workspace) -> None:
    kept, revoked = api_token_create(user=user), api_token_create(user=user)
    assert api_tokens_revoke(user=user, prefix=revoked.key[:8]) == 1
    response = _get(revoked.key, workspace.slug)
    assert response.status_code == 401
    assert response.json() == {"error": "authentication_failed", "detail": "Token revoked."}
    assert _get(kept.key, workspace.slug).status_code == 200


def test_an_expired_token_is_refused_and_one_not_yet_expired_works(user: Any, workspace: Workspace) -> None:
    now = timezone.now()
    expired = api_token_create(user=user, expires_at=now - timedelta(seconds=1))
    fresh = api_token_create(user=user, expires_at=now + timedelta(hours=1))
    response = _get(expired.key, workspace.slug)
    assert response.status_code == 401
    assert response.json()["detail"] == "Token expired."
    assert _get(fresh.key, workspace.slug).status_code == 200


def test_request_auth_is_the_token_that_authenticated(user: Any) -> None:
    from rest_framework.request import Request
    from rest_framework.test import APIRequestFactory

    from memories.api_auth import TokenAuthentication

    issued = api_token_create(user=user, name="ci")
    http = APIRequestFactory().get("/", HTTP_AUTHORIZATION=f"Token {issued.key}")
    authenticated = TokenAuthentication().authenticate(Request(http))
    assert authenticated is not None
    found_user, token = authenticated
    assert found_user.pk == user.pk and (token.pk, token.prefix) == (issued.token.pk, issued.key[:8])
