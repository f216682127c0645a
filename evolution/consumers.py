"""WebSocket consumer that pushes an evolution run's progress to the run page watching it."""

from __future__ import annotations

import time
import uuid
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.template.loader import render_to_string

from core.errors import DomainError
from evolution import page_selectors
from evolution.runner import PROGRESS_EVENT
from evolution.views import RUN, run_context
from memories.consumers import WorkspaceSocket
from memories.live import workspace_group
from memories.selectors import WorkspaceAccess, workspace_access


class RunProgressConsumer(WorkspaceSocket):
    """Joins `ws.<id>.events` after checking membership and the run; re-renders the run body on progress.

    The pushed HTML is the same `run_body` partial the page renders and polls, so the socket and the
    polling fallback can never disagree. The current body is sent right after connecting: progress made
    between the page render and the connection would otherwise be missed.
    """

    access: WorkspaceAccess | None = None
    run_id: uuid.UUID | None = None

    async def connect(self) -> None:
        kwargs = self.scope["url_route"]["kwargs"]
        try:
            access = await sync_to_async(workspace_access)(user=self.scope.get("user"), slug=kwargs["ws"])
        except DomainError:
            await self.close(code=4404)
            return
        run_id = kwargs["run_id"]
        run_id = run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id))
        if await sync_to_async(page_selectors.run_one)(workspace=access.workspace, run_id=run_id) is None:
            await self.close(code=4404)
            return
        self.access = access
        self.run_id = run_id
        self.checked_at = time.monotonic()
        await self.channel_layer.group_add(workspace_group(access.workspace.pk), self.channel_name)
        await self.accept()
        await self._push()

    async def disconnect(self, code: int) -> None:
        if self.access is not None:
            await self.channel_layer.group_discard(workspace_group(self.access.workspace.pk), self.channel_name)

    async def workspace_event(self, event: dict[str, Any]) -> None:
        payload = event.get("payload") or {}
        ours = event.get("event") == PROGRESS_EVENT and str(payload.get("run_id")) == str(self.run_id)
        if ours and await self.still_allowed():
            await self._push()

    async def _push(self) -> None:
        html = await sync_to_async(self._render)()
        if html:
            await self.send(text_data=html)

    def _render(self) -> str:
        if self.access is None or self.run_id is None:
            return ""
        run = page_selectors.run_one(workspace=self.access.workspace, run_id=self.run_id)
        if run is None:
            return ""
        context = run_context(self.access, run)
        # Forms in the pushed body (apply, revert) need this session's CSRF secret; the middleware accepts the
        # unmasked secret as a token.
        cookies = self.scope.get("cookies") or {}
        context["csrf_token"] = cookies.get(settings.CSRF_COOKIE_NAME, "")
        return render_to_string(f"{RUN}#run_body", context)
