"""manage.py create_api_token: the token is the last word of the output."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def token_output(*args: str) -> str:
    out = StringIO()
    call_command("create_api_token", *args, stdout=out)
    return out.getvalue()


def test_the_printed_token_is_the_last_word_and_authenticates(user: Any) -> None:
    output = token_output("alice")
    key = output.split()[-1]
    assert Token.objects.get(user=user).key == key
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/workspaces/").status_code == 200


def test_asking_again_prints_the_same_token(user: Any) -> None:
    first = token_output("alice").split()[-1]
    assert token_output("alice").split()[-1] == first
    assert Token.objects.filter(user=user).count() == 1


def test_rotate_replaces_the_token(user: Any) -> None:
    old = token_output("alice").split()[-1]
    new = token_output("alice", "--rotate").split()[-1]
    assert new != old
    assert list(Token.objects.filter(user=user).values_list("key", flat=True)) == [new]


def test_an_unknown_user_is_a_command_error(user: Any) -> None:
    with pytest.raises(CommandError, match="nobody"):
        token_output("nobody")
    assert not Token.objects.exists()
