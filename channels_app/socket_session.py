"""The login session of a WebSocket, without channels' per-frame session wrapper.

channels' ``SessionMiddleware`` puts the session in the scope and hands the consumer
a ``send`` that saves the session and sets its cookie on ``http.response.start``, a
message a WebSocket never sends; for every frame it still reads the session's
``modified`` and ``is_empty()`` through a ``LazyObject``. That was about a tenth of
Daphne's CPU while streaming (``bench/stream``). A socket's consumer saves a session
it changes itself, as channels documents for WebSockets, so its frames go straight
to the server's ``send``.
"""

from __future__ import annotations

from typing import Any

from channels.auth import AuthMiddleware
from channels.sessions import CookieMiddleware, InstanceSessionWrapper, SessionMiddleware


class SocketSessionMiddleware(SessionMiddleware):  # type: ignore[misc]
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] != "websocket":
            return await super().__call__(scope, receive, send)
        wrapper = InstanceSessionWrapper(scope, send)
        await wrapper.resolve_session()
        return await self.inner(wrapper.scope, receive, send)


def socket_auth_stack(inner: Any) -> Any:
    """channels' ``AuthMiddlewareStack`` with :class:`SocketSessionMiddleware`."""
    return CookieMiddleware(SocketSessionMiddleware(AuthMiddleware(inner)))
