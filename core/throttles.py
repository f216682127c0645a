"""Rate limits: fixed-window counters in Django's cache (Redis when REDIS_URL is set, else process memory).

A scope (``login``, ``login_user``, ``token_failure``, ``write``) has a rate in ``settings.THROTTLE_RATES``:
``(count, seconds)`` as ``config.env_rate`` reads it from the environment (``"10/min"``), or ``None`` for
no limit. Each (scope, identity) pair counts events in windows of the rate's length, aligned to the epoch:
within one window at most ``count`` events pass, and a refused caller is told the seconds left until the
window ends (the Retry-After). A fixed window costs two cache round trips per event, where DRF's
sliding-window log rewrites a list of every timestamp in the window (thousands at the write rate); the
price is that a burst straddling two windows may reach twice the count.

Identities are hashed into the key, so the cache never holds usernames or addresses in plain text.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

if TYPE_CHECKING:  # rest_framework.views imports the authenticators, which import this module
    from rest_framework.views import APIView


@dataclass(frozen=True)
class Rate:
    """At most ``count`` events per ``seconds``."""

    count: int
    seconds: int


def rate_of(scope: str) -> Rate | None:
    """The scope's rate, read at each call so a changed setting takes effect at once (None: no limit)."""
    value = settings.THROTTLE_RATES.get(scope)
    return None if value is None else Rate(*value)


def _key(scope: str, ident: str, window: int) -> str:
    digest = hashlib.sha256(ident.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"throttle:{scope}:{digest}:{window}"


def _window(rate: Rate, now: float) -> tuple[int, float]:
    """The index of the window holding `now` and the seconds left in it (at least 1)."""
    window = int(now // rate.seconds)
    return window, max(1.0, math.ceil((window + 1) * rate.seconds - now))


def throttle_hit(scope: str, ident: str, *, now: float | None = None) -> float | None:
    """Count one event of `ident` in `scope`; the seconds to wait when it is over the rate, else None."""
    rate = rate_of(scope)
    if rate is None:
        return None
    window, left = _window(rate, time.time() if now is None else now)
    key = _key(scope, ident, window)
    # add() is a no-op on an existing key; incr() is atomic in Redis and under LocMemCache's lock.
    cache.add(key, 0, timeout=rate.seconds + 1)
    try:
        count = cache.incr(key)
    except ValueError:  # expired between the two calls
        cache.set(key, 1, timeout=rate.seconds + 1)
        count = 1
    return left if count > rate.count else None


def throttle_wait(scope: str, ident: str, *, now: float | None = None) -> float | None:
    """The seconds `ident` must wait in `scope` because its events already reached the rate, else None.

    Reads without counting: for scopes that count only failures, checked before the attempt."""
    rate = rate_of(scope)
    if rate is None:
        return None
    window, left = _window(rate, time.time() if now is None else now)
    count = cache.get(_key(scope, ident, window), 0)
    return left if int(count) >= rate.count else None


def client_address(request: HttpRequest | Request) -> str:
    """The caller's address as DRF's throttles see it (REMOTE_ADDR, or the X-Forwarded-For entry that
    ``REST_FRAMEWORK["NUM_PROXIES"]`` trusted proxies appended)."""
    # get_ident reads only request.META, which a Django request and a DRF one both have.
    return str(BaseThrottle().get_ident(request))  # type: ignore[arg-type]


class WriteRateThrottle(BaseThrottle):
    """Scope ``write``: each user's unsafe-method API requests (POST, PUT, PATCH, DELETE).

    Reads answered over POST (search, context) set ``throttle_classes = []`` on their views."""

    scope = "write"

    def __init__(self) -> None:
        self._wait: float | None = None

    def allow_request(self, request: Request, view: APIView) -> bool:
        if request.method in SAFE_METHODS:
            return True
        user: Any = request.user
        ident = f"user:{user.pk}" if user is not None and user.is_authenticated else f"addr:{client_address(request)}"
        self._wait = throttle_hit(self.scope, ident)
        return self._wait is None

    def wait(self) -> float | None:
        return self._wait
