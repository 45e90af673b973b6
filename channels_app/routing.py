"""WebSocket URL routes, mounted by ``claw_platform.asgi``. tests/api/test_isolation.py
opens every one with another tenant's and another member's credentials: a new route
needs a classification there."""

from __future__ import annotations

from django.urls import path

from channels_app.consumers import SessionConsumer

websocket_urlpatterns = [
    path("ws/sessions/<uuid:session_id>/", SessionConsumer.as_asgi()),
]
