"""WebSocket URL routes, mounted by ``claw_platform.asgi``."""

from __future__ import annotations

from django.urls import path

from channels_app.consumers import SessionConsumer

websocket_urlpatterns = [
    path("ws/sessions/<uuid:session_id>/", SessionConsumer.as_asgi()),
]
