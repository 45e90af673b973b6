from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

ORIGIN = b"http://127.0.0.1"


def login_cookie(user: Any) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


async def open_socket(
    session_id: Any, user: Any = None, *, origin: bytes = ORIGIN
) -> tuple[WebsocketCommunicator, bool, int | None]:
    """A communicator on the session's socket through the real ASGI stack (origin
    check, login session, URL routing); returns it with (connected, close code)."""
    from claw_platform.asgi import application

    headers = [(b"origin", origin), (b"host", b"127.0.0.1")]
    if user is not None:
        cookie = await sync_to_async(login_cookie)(user)
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    communicator = WebsocketCommunicator(application, f"/ws/sessions/{session_id}/", headers=headers)
    connected, code = await communicator.connect(timeout=10)
    return communicator, connected, code
