"""Token authentication for the REST API: DRF's rules, one raw query per request, failures rate-limited.

A token is found by the SHA-256 of the offered key (``memories.tokens``); the key itself is stored nowhere.
DRF's TokenAuthentication reads its token with ``select_related("user")`` through the ORM, whose query
building cost ~0.9 ms per request for one indexed lookup (measured on the context endpoint, where a
request's whole budget is ~25 ms). This reads the user and the token's state through one RawQuerySet
joined on the digest (~0.2 ms). Everything else is DRF's: the ``Authorization: Token <key>`` header
parsing, the error messages, the inactive-user check and the 401 challenge. A revoked or expired token is
a 401 saying so. ``request.auth`` is the ApiToken (id, prefix, user).

An address whose failed token checks reach the ``token_failure`` rate is answered 429 with Retry-After,
without looking its token up, until the window ends; valid tokens never count.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from core.throttles import client_address, throttle_hit, throttle_wait
from memories.models import ApiToken
from memories.tokens import token_digest

FAILURE_SCOPE = "token_failure"


class TokenAuthentication(authentication.TokenAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None  # no token offered: another authenticator's turn, or a 401
        address = client_address(request)
        wait = throttle_wait(FAILURE_SCOPE, address)
        if wait is not None:
            raise exceptions.Throttled(
                wait, detail=f"too many failed token checks from this address; retry in {wait:.0f} s"
            )
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            throttle_hit(FAILURE_SCOPE, address)
            raise

    def authenticate_credentials(self, key: str) -> tuple[Any, ApiToken]:
        user_model = get_user_model()
        qn = connection.ops.quote_name
        user_meta, token_meta = user_model._meta, ApiToken._meta
        token_user = token_meta.get_field("user").column
        sql = (
            f"SELECT u.*, t.{qn('id')} AS token_id, t.{qn('prefix')} AS token_prefix, "
            f"CASE WHEN t.{qn('revoked_at')} IS NOT NULL THEN 'revoked' "
            f"WHEN t.{qn('expires_at')} IS NOT NULL AND t.{qn('expires_at')} <= %s THEN 'expired' "
            f"ELSE '' END AS token_state "
            f"FROM {qn(user_meta.db_table)} u JOIN {qn(token_meta.db_table)} t "
            f"ON t.{qn(token_user)} = u.{qn(user_meta.pk.column)} WHERE t.{qn('digest')} = %s"
        )
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        users = list(user_model._default_manager.raw(sql, [now, token_digest(key)]))
        if not users:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        user: Any = users[0]  # with the token_* columns of the SELECT as attributes
        if user.token_state:
            raise exceptions.AuthenticationFailed(f"Token {user.token_state}.")
        if not user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        return user, ApiToken(id=user.token_id, prefix=user.token_prefix, user=user)
