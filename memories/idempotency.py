"""Idempotency keys for the API's creating writes (memory create, bulk create, conversation ingest).

A client that sends ``Idempotency-Key: <key>`` and retries after a dropped connection gets the first answer
again (same status, same body, header ``Idempotent-Replayed: true``) and nothing is written twice. The key
belongs to a workspace and a user and lives ``settings.IDEMPOTENCY_KEY_HOURS``; the same key with another
body or on another endpoint is refused (422 naming the header). Only successes are kept: a refused request
stores nothing, so its retry is judged afresh.

The key's row is inserted in the same transaction as the write and its answer. Two requests with one key at
once therefore serialize on the unique index: the second waits for the first to commit, then replays it
(or, when the first failed and rolled back, does the work itself).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import orjson
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework.request import Request
from rest_framework.response import Response

from core.errors import DomainError, InvalidInput
from memories.api_render import JSONRenderer
from memories.models import IdempotencyKey, Workspace

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_LENGTH = 255


class KeyReused(DomainError):
    status_code = 422
    code = "idempotency_key_reused"


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any
    replayed: bool

    def response(self) -> Response:
        response = Response(self.body, status=self.status)
        if self.replayed:
            response[REPLAYED_HEADER] = "true"
        return response


def key_of(request: Request) -> str | None:
    """The request's Idempotency-Key, None without one; a 400 naming the header when it is malformed."""
    raw = request.headers.get(HEADER)
    if raw is None:
        return None
    key = raw.strip()
    if not 1 <= len(key) <= MAX_KEY_LENGTH or not key.isascii() or not key.isprintable():
        raise InvalidInput(f"{HEADER}: expected 1 to {MAX_KEY_LENGTH} printable ASCII characters", field=HEADER)
    return key


def request_digest(endpoint: str, data: Any) -> str:
    """SHA-256 of the endpoint and the parsed body, keys sorted: the same JSON however it was spaced."""
    return hashlib.sha256(orjson.dumps([endpoint, data], option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()


def idempotent(
    *,
    workspace: Workspace,
    user: AbstractBaseUser,
    key: str | None,
    endpoint: str,
    data: Any,
    run: Callable[[], tuple[int, Any]],
) -> Answer:
    """Answer with `run()` (status, body), or with the stored first answer of an earlier request with `key`."""
    if key is None:
        status, body = run()
        return Answer(status, body, replayed=False)
    digest = request_digest(endpoint, data)
    now = timezone.now()
    with transaction.atomic():
        IdempotencyKey.objects.filter(workspace=workspace, expires_at__lte=now).delete()
        try:
            with transaction.atomic():
                record = IdempotencyKey.objects.create(
                    workspace=workspace,
                    user_id=user.pk,
                    key=key,
                    endpoint=endpoint,
                    request_digest=digest,
                    created_at=now,
                    expires_at=now + timedelta(hours=settings.IDEMPOTENCY_KEY_HOURS),
                )
        except IntegrityError:
            earlier = IdempotencyKey.objects.get(workspace=workspace, user_id=user.pk, key=key)
            if (earlier.endpoint, earlier.request_digest) != (endpoint, digest):
                raise KeyReused(
                    f"{HEADER}: {key!r} was used for another request; send a new key for a new request",
                    field=HEADER,
                ) from None
            return Answer(earlier.status_code, orjson.loads(earlier.response), replayed=True)
        status, body = run()
        record.status_code = status
        record.response = JSONRenderer().render(body).decode()
        record.save(update_fields=["status_code", "response"])
    return Answer(status, body, replayed=False)
