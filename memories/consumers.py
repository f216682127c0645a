"""WebSocket consumer that pushes activation changes of one workspace to the pages watching it."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.template.loader import render_to_string
from django.utils import timezone

from core.errors import DomainError
from memories.algorithms.activation import decayed_activation
from memories.live import activation_group
from memories.models import Memory
from memories.selectors import workspace_access


# channels ships no type information, so its base class is Any to mypy.
class ActivationConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]
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
        await self.channel_layer.group_add(activation_group(self.workspace_id), self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.workspace_id is not None:
            await self.channel_layer.group_discard(activation_group(self.workspace_id), self.channel_name)

    async def activation_changed(self, event: dict[str, Any]) -> None:
        html = await sync_to_async(self._render)(event["items"])
        if html:
            await self.send(text_data=html)

    def _render(self, items: list[list[Any]]) -> str:
        if self.workspace_id is None:  # an event can only arrive after connect joined the group
            return ""
        ids = [mid for mid, _ in items]
        now = timezone.now()
        # Re-read so the pushed bar shows exactly what the page would render now.
        rows = Memory.objects.filter(workspace_id=self.workspace_id, id__in=ids).only(
            "id",
            "activation_score",
            "activation_last_boost_at",
            "activation_half_life_hours",
            "activation_boost_count",
        )
        parts = []
        for memory in rows:
            score = decayed_activation(
                memory.activation_score,
                memory.activation_last_boost_at,
                memory.activation_half_life_hours,
                now,
            )
            parts.append(
                render_to_string(
                    "memories/partials/activation_bar.html",
                    {"memory": memory, "activation": score, "oob": True},
                )
            )
        return "".join(parts)
