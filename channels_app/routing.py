"""WebSocket URL routes, mounted by ``claw_platform.asgi``. tests/api/test_isolation.py
opens every one with another tenant's and another member's credentials: a new route
needs a classification there."""

from __future__ import annotations

from typing import Any

from django.urls import path, re_path

from channels_app.consumers import CLOSE_NOT_FOUND, SessionConsumer

websocket_urlpatterns = [
    path("ws/sessions/<uuid:session_id>/", SessionConsumer.as_asgi()),
]


async def refuse_unknown_socket(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Any other socket path (a session id that is not a UUID, a typo) is refused as an
    unknown session is, with 4404, instead of failing in the router."""
    message = await receive()
    if message["type"] == "websocket.connect":
        await send({"type": "websocket.close", "code": CLOSE_NOT_FOUND})


# Mounted after every route (claw_platform.asgi): matches whatever they did not.
unknown_socket_route = re_path(r"", refuse_unknown_socket)  # type: ignore[arg-type]
