from __future__ import annotations

from django.urls import path

from memories.consumers import ActivationConsumer

websocket_urlpatterns = [
    path("ws/workspaces/<slug:ws>/activation/", ActivationConsumer.as_asgi()),
]
