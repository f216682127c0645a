"""ASGI entry point: HTTP through Django (and /mcp/ through the MCP server), WebSockets through Channels
(session-authenticated)."""

from __future__ import annotations

import os

from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smartmemory_site.settings")

from smartmemory_site.threadpool import PooledSyncThreads, sync_chain_asgi_application

django_asgi_app = sync_chain_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from memories.live import RemembersLoop  # noqa: E402
from smartmemory_site.bodylimit import BodyLimit  # noqa: E402
from smartmemory_site.mcp.http import with_mcp  # noqa: E402
from smartmemory_site.routing import websocket_urlpatterns  # noqa: E402
from smartmemory_site.runtime import start_background_workers  # noqa: E402

start_background_workers()

application = ProtocolTypeRouter(
    {
        "http": BodyLimit(
            # /mcp/ (smartmemory_site.mcp.http) runs inside the same pool of request threads as the REST API.
            PooledSyncThreads(with_mcp(django_asgi_app), size=settings.SYNC_WORKER_THREADS),
            max_bytes=settings.REQUEST_MAX_BYTES,
            max_bulk_bytes=settings.REQUEST_MAX_BULK_BYTES,
        ),
        # RemembersLoop: in-memory pushes from other threads run on this loop (memories.live.group_send).
        "websocket": RemembersLoop(AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))),
    }
)
