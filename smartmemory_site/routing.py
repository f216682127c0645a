from __future__ import annotations

from django.urls import path

from evolution.consumers import RunProgressConsumer
from memories.consumers import ActivationConsumer

websocket_urlpatterns = [
    path("ws/workspaces/<slug:ws>/activation/", ActivationConsumer.as_asgi()),
    path("ws/workspaces/<slug:ws>/evolution/runs/<uuid:run_id>/", RunProgressConsumer.as_asgi()),
]
