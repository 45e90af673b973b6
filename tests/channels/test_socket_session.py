"""The login session of a socket (channels_app.socket_session): the consumer gets the
signed-in user and the session, and its frames go straight to the server's ``send``;
an HTTP scope keeps channels' wrapper, which saves the session and sets its cookie."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from channels_app.socket_session import socket_auth_stack
from tests.channels.conftest import login_cookie

pytestmark = pytest.mark.django_db(transaction=True)


class Recorder:
    """An inner application that keeps what it was called with."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, Any], Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.calls.append((scope, send))


async def server_send(message: dict[str, Any]) -> None:
    return None


async def test_a_sockets_consumer_gets_its_user_and_the_servers_own_send(tenant_a: Any) -> None:
    cookie = await sync_to_async(login_cookie)(tenant_a.member)
    inner = Recorder()
    scope = {"type": "websocket", "path": "/ws/", "headers": [(b"cookie", f"sessionid={cookie}".encode())]}
    await socket_auth_stack(inner)(scope, None, server_send)
    [(seen, send)] = inner.calls
    assert send is server_send  # no session wrapper between the consumer and the server
    assert seen["session"].session_key == cookie
    user = await sync_to_async(lambda: seen["user"].pk)()
    assert user == tenant_a.member.pk


async def test_an_anonymous_socket_gets_an_anonymous_user() -> None:
    inner = Recorder()
    await socket_auth_stack(inner)({"type": "websocket", "path": "/ws/", "headers": []}, None, server_send)
    [(seen, send)] = inner.calls
    assert send is server_send
    assert await sync_to_async(lambda: seen["user"].is_anonymous)()


async def test_an_http_scope_keeps_the_wrapper_that_saves_the_session() -> None:
    sent: list[dict[str, Any]] = []

    async def record(message: dict[str, Any]) -> None:
        sent.append(message)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scope["session"]["seen"] = True  # a changed session is saved and its cookie set
        await send({"type": "http.response.start", "status": 200, "headers": []})

    await socket_auth_stack(app)({"type": "http", "path": "/", "headers": []}, None, record)
    headers = dict(sent[0]["headers"])
    assert b"sessionid=" in headers[b"Set-Cookie"]
