"""Rate limits on password logins: the site's login form and the admin's.

Two limits, both in ``settings.THROTTLE_RATES`` (``core.throttles``):

- ``login``: login POSTs per client address, every attempt counted (one address guessing many accounts);
- ``login_user``: failed logins per username, whatever the address (many addresses guessing one account).
  Only failures count, through Django's ``user_login_failed`` signal, so a user who logs in is never held
  back by their own successes. It lets someone who knows a username hold its logins for the rest of a
  window; that is the price of stopping a guesser who spreads over many addresses.

A refused attempt is answered 429 with Retry-After and the site's login page, its password never checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.deprecation import MiddlewareMixin

from core.throttles import client_address, throttle_hit, throttle_wait

LOGIN_VIEWS = frozenset({"login", "admin:login"})


class LoginThrottleMiddleware(MiddlewareMixin):
    """Refuses login POSTs over either limit before the login view reads the password (sync and async)."""

    def process_view(
        self, request: HttpRequest, view_func: Callable[..., Any], args: Any, kwargs: Any
    ) -> HttpResponse | None:
        match = request.resolver_match
        if request.method != "POST" or match is None or match.view_name not in LOGIN_VIEWS:
            return None
        username = str(request.POST.get("username", ""))
        wait = throttle_hit("login", client_address(request))
        if wait is None and username:
            wait = throttle_wait("login_user", username.lower())
        if wait is None:
            return None
        messages.error(request, f"Too many login attempts. Try again in {wait:.0f} seconds.")
        response = TemplateResponse(
            request,
            "registration/login.html",
            {"form": AuthenticationForm(request), "next": request.POST.get("next", "")},
            status=429,
        )
        response["Retry-After"] = f"{wait:.0f}"
        return response


@receiver(user_login_failed, dispatch_uid="smartmemory_site.login_throttle")
def _count_failed_login(sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **_: Any) -> None:
    username = credentials.get("username")
    if isinstance(username, str) and username:
        throttle_hit("login_user", username.lower())
