"""Password logins are rate-limited per address and per username: 429 with Retry-After, password unread."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from django.test import Client

from core import throttles

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"
ADMIN_LOGIN = "/admin/login/"


@pytest.fixture
def rates(settings: Any) -> None:
    settings.THROTTLE_RATES = {**settings.THROTTLE_RATES, "login": (5, 60), "login_user": (3, 3600)}


def _post(url: str, username: str, password: str, address: str = "10.0.0.1") -> Any:
    return Client(REMOTE_ADDR=address).post(url, {"username": username, "password": password})


def test_one_address_trying_many_passwords_is_refused_after_the_rate(rates: None, make_user: Any) -> None:
    make_user("alice")
    statuses = [_post(LOGIN, f"guess-{i}", "wrong").status_code for i in range(6)]
    assert statuses == [200] * 5 + [429]
    refused = _post(LOGIN, "alice", "pw-alice")
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert "Too many login attempts" in refused.content.decode()
    assert "_auth_user_id" not in refused.wsgi_request.session  # the right password was not even read
    assert _post(LOGIN, "alice", "pw-alice", address="10.0.0.2").status_code == 302


def test_failures_on_one_username_from_many_addresses_hold_it(
    rates: None, make_user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Windows are aligned to the clock: in an hour's last minute the hour window has less than 60 s left.
    # The clock is held at the middle of an hour so that the answer does not depend on when the test runs.
    monkeypatch.setattr(throttles, "time", SimpleNamespace(time=lambda: 1_800_000_000.0 // 3600 * 3600 + 1800))
    make_user("alice")
    for i in range(3):
        assert _post(LOGIN, "alice", "wrong", address=f"10.0.1.{i}").status_code == 200
    refused = _post(LOGIN, "alice", "pw-alice", address="10.0.2.1")
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 60  # the username's window is an hour
    assert _post(LOGIN, "ALICE", "wrong", address="10.0.2.2").status_code == 429
    assert _post(LOGIN, "bob", "wrong", address="10.0.2.3").status_code == 200


def test_successful_logins_do_not_count_against_the_username(rates: None, make_user: Any) -> None:
    make_user("alice")
    for i in range(4):
        assert _post(LOGIN, "alice", "pw-alice", address=f"10.0.3.{i}").status_code == 302


def test_the_admin_login_is_limited_like_the_site_login(rates: None, make_user: Any) -> None:
    admin = make_user("root")
    admin.is_staff = admin.is_superuser = True
    admin.save()
    statuses = [_post(ADMIN_LOGIN, "root", f"guess-{i}").status_code for i in range(4)]
    assert statuses == [200, 200, 200, 429]
    assert _post(LOGIN, "root", "pw-root", address="10.9.9.9").status_code == 429


def test_forwarded_for_is_the_clients_word_without_a_proxy(rates: None, make_user: Any) -> None:
    for i in range(5):
        Client(REMOTE_ADDR="10.0.4.1", HTTP_X_FORWARDED_FOR=f"192.0.2.{i}").post(LOGIN, {"username": f"u{i}"})
    assert Client(REMOTE_ADDR="10.0.4.1", HTTP_X_FORWARDED_FOR="192.0.2.99").post(LOGIN, {}).status_code == 429


def test_behind_a_proxy_the_address_it_appended_counts(rates: None, settings: Any) -> None:
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    for i in range(5):
        Client(REMOTE_ADDR="10.0.5.1", HTTP_X_FORWARDED_FOR=f"spoof-{i}, 192.0.2.7").post(LOGIN, {"username": "u"})
    assert Client(REMOTE_ADDR="10.0.5.1", HTTP_X_FORWARDED_FOR="new, 192.0.2.7").post(LOGIN, {}).status_code == 429
    assert Client(REMOTE_ADDR="10.0.5.1", HTTP_X_FORWARDED_FOR="192.0.2.8").post(LOGIN, {}).status_code == 200


def test_pages_other_than_the_login_post_are_not_limited(rates: None) -> None:
    for _ in range(10):
        assert Client(REMOTE_ADDR="10.0.6.1").get(LOGIN).status_code == 200
