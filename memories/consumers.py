"""WebSocket consumers of one workspace: the activation push, and the membership check every consumer of a
workspace's events shares (``WorkspaceSocket``)."""

from __future__ import annotations

import time
from typing import Any

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.contrib.sessions.backends.signed_cookies import SessionStore as CookieSession
from django.utils import timezone

from core.errors import DomainError
from memories import fragments
from memories.algorithms.activation import decayed_activation
from memories.live import activation_group
from memories.models import Memory
from memories.selectors import LIVE_COLUMNS, workspace_access

ACCESS_RECHECK_SECONDS = 30.0
"""How long a socket trusts the access it was granted before it checks again on the next push (a logout,
which no event announces, closes it within this time; a membership change closes it at once)."""
CLOSE_FORBIDDEN = 4403


# channels ships no type information, so its base class is Any to mypy.
class WorkspaceSocket(AsyncWebsocketConsumer):  # type: ignore[misc]
    """Membership is checked at connect and again: at once when the workspace's memberships change (the
    ``access.changed`` group message), and before a push once ``ACCESS_RECHECK_SECONDS`` have passed. A
    socket whose user is no longer a member, or whose session was logged out, is closed with 4403."""

    checked_at: float = 0.0

    def _slug(self) -> str:
        return str(self.scope["url_route"]["kwargs"]["ws"])

    def _allowed_now(self) -> bool:
        session = self.scope.get("session")
        key = getattr(session, "session_key", None)
        # A logout deletes the session; a cookie-based session has no server side to look up.
        if session is not None and key and not isinstance(session, CookieSession) and not session.exists(key):
            return False
        try:
            workspace_access(user=self.scope.get("user"), slug=self._slug())
        except DomainError:
            return False
        return True

    async def still_allowed(self, *, force: bool = False) -> bool:
        """False (and the socket closed) once the user may no longer read the workspace."""
        if not force and time.monotonic() - self.checked_at < ACCESS_RECHECK_SECONDS:
            return True
        if await sync_to_async(self._allowed_now)():
            self.checked_at = time.monotonic()
            return True
        await self.close(code=CLOSE_FORBIDDEN)
        return False

    async def access_changed(self, event: dict[str, Any]) -> None:
        await self.still_allowed(force=True)


class ActivationConsumer(WorkspaceSocket):
    """Joins `ws.<id>.activation` after checking membership; sends htmx out-of-band bar swaps."""

    workspace_id: int | None = None

    async def connect(self) -> None:
        slug = self.scope["url_route"]["kwargs"]["ws"]
        user = self.scope.get("user")
        try:
            access = await sync_to_async(workspace_access)(user=user, slug=slug)
        except DomainError:
            await self.close(code=4404)
            return
        self.workspace_id = access.workspace.pk
        self.checked_at = time.monotonic()
        await self.channel_layer.group_add(activation_group(self.workspace_id), self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.workspace_id is not None:
            await self.channel_layer.group_discard(activation_group(self.workspace_id), self.channel_name)

    async def activation_changed(self, event: dict[str, Any]) -> None:
        if not await self.still_allowed():
            return
        html = await sync_to_async(self._render)(event["items"])
        if html:
            await self.send(text_data=html)

    def _render(self, items: list[list[Any]]) -> str:
        if self.workspace_id is None:  # an event can only arrive after connect joined the group
            return ""
        ids = [mid for mid, _ in items]
        now = timezone.now()
        # Re-read so the pushed bar shows exactly what the page would render now.
        rows = Memory.objects.filter(workspace_id=self.workspace_id, id__in=ids).only(*LIVE_COLUMNS)
        parts = []
        for memory in rows:
            score = decayed_activation(
                memory.activation_score,
                memory.activation_last_boost_at,
                memory.activation_half_life_hours,
                now,
            )
            parts.append(fragments.activation_push(memory, score))
        return "".join(parts)
