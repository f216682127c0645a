"""REST API tokens: issued once, stored as a hash, optionally expiring, revocable.

``api_token_create`` returns the key with the stored token: it is the only time the key exists outside
the caller. A request's ``Authorization: Token <key>`` is matched by the key's SHA-256
(``memories.api_auth``); a revoked or expired token stops working at the next request.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from history import audit
from history.models import Action
from memories.models import ApiToken, Workspace

KEY_BYTES = 20
"""160 random bits, written as 40 hex characters (the length DRF's tokens had)."""


@dataclass(frozen=True)
class IssuedToken:
    key: str
    token: ApiToken


def token_digest(key: str) -> str:
    """The stored form of a key: its SHA-256, in hex."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


@transaction.atomic
def api_token_create(
    *,
    user: AbstractBaseUser,
    name: str = "",
    expires_at: datetime | None = None,
    workspace: Workspace | None = None,
) -> IssuedToken:
    """Issue a new token for `user` and return its key (shown once); the grant is recorded in `workspace`'s
    history when the token was asked for from one."""
    key = secrets.token_hex(KEY_BYTES)
    token = ApiToken.objects.create(
        user_id=user.pk, digest=token_digest(key), prefix=key[:8], name=name[:100], expires_at=expires_at
    )
    if workspace is not None:
        audit.record_save(
            audit.record_build(
                workspace=workspace,
                evolver="tokens",
                action=Action.GRANT,
                reason=f"API token {token.prefix}… created for {user.get_username()}",
                after={"token_user": user.pk, "token_prefix": token.prefix},
                actor=user,
            )
        )
    return IssuedToken(key, token)


def api_tokens_revoke(*, user: AbstractBaseUser, prefix: str = "", except_id: int | None = None) -> int:
    """Revoke `user`'s active tokens (those whose key starts with `prefix`, when given); return how many."""
    tokens = ApiToken.objects.filter(user_id=user.pk, revoked_at__isnull=True)
    if prefix:
        tokens = tokens.filter(prefix__startswith=prefix[:8])
    if except_id is not None:
        tokens = tokens.exclude(pk=except_id)
    return tokens.update(revoked_at=timezone.now())


def api_tokens_of(*, user: AbstractBaseUser) -> list[ApiToken]:
    """`user`'s tokens, newest first, revoked and expired ones included."""
    return list(ApiToken.objects.filter(user_id=user.pk).order_by("-created_at", "-pk"))
