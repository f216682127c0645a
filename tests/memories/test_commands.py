"""manage.py create_api_token and api_tokens: the token is the last word of the output, shown once."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from memories.models import ApiToken
from memories.tokens import token_digest

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def command_output(name: str, *args: str) -> str:
    out = StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue()


def token_output(*args: str) -> str:
    return command_output("create_api_token", *args)


def authenticates(key: str) -> bool:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client.get("/api/v1/workspaces/").status_code == 200


def test_the_printed_token_is_the_last_word_and_authenticates(user: Any) -> None:
    output = token_output("alice")
    key = output.split()[-1]
    assert ApiToken.objects.get(user=user).digest == token_digest(key)
    assert key not in ApiToken.objects.values_list("digest", flat=True)
    assert authenticates(key)


def test_asking_again_issues_another_token_and_the_first_keeps_working(user: Any) -> None:
    first = token_output("alice").split()[-1]
    second = token_output("alice").split()[-1]
    assert second != first
    assert authenticates(first) and authenticates(second)
    assert ApiToken.objects.filter(user=user).count() == 2


def test_rotate_revokes_the_other_tokens(user: Any) -> None:
    old = token_output("alice").split()[-1]
    output = token_output("alice", "--rotate")
    new = output.split()[-1]
    assert "1 earlier revoked" in output
    assert authenticates(new) and not authenticates(old)


def test_a_token_may_expire(user: Any) -> None:
    output = token_output("alice", "--expires-days", "30", "--name", "ci")
    token = ApiToken.objects.get(user=user)
    assert token.name == "ci" and token.expires_at is not None
    assert 29 < (token.expires_at - timezone.now()).total_seconds() / 86400 <= 30
    assert "expires" in output and authenticates(output.split()[-1])
    with pytest.raises(CommandError, match="expires-days"):
        token_output("alice", "--expires-days", "0")


def test_an_unknown_user_is_a_command_error(user: Any) -> None:
    with pytest.raises(CommandError, match="nobody"):
        token_output("nobody")
    assert not ApiToken.objects.exists()


def test_api_tokens_lists_by_prefix_and_revokes(user: Any) -> None:
    first = token_output("alice", "--name", "laptop").split()[-1]
    second = token_output("alice", "--name", "ci").split()[-1]
    listing = command_output("api_tokens", "alice")
    assert f"{first[:8]}…" in listing and f"{second[:8]}…" in listing
    assert first not in listing and second not in listing
    assert "Revoked 1 token " in command_output("api_tokens", "alice", "--revoke", first[:6])
    assert not authenticates(first) and authenticates(second)
    assert "revoked" in command_output("api_tokens", "alice")
    assert "Revoked 1 token " in command_output("api_tokens", "alice", "--revoke-all")
    assert not authenticates(second)
    with pytest.raises(CommandError, match="4 characters"):
        command_output("api_tokens", "alice", "--revoke", "ab")
