"""Which WebSocket handshakes reach the consumers (A6).

A browser always sends ``Origin``: it must name an allowed host, so another site's
page cannot open a socket with our login cookie. An API client (no ``Origin``) may
connect too, but its cookies are dropped: it can only authenticate with an API key
in its first frame."""

from __future__ import annotations

from typing import Any

from channels.security.websocket import AllowedHostsOriginValidator


class OriginOrKeyClientValidator:
    def __init__(self, application: Any) -> None:
        self.application = application
        self.browser = AllowedHostsOriginValidator(application)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        headers = scope.get("headers", [])
        if any(name == b"origin" for name, _value in headers):
            return await self.browser(scope, receive, send)
        scope = {**scope, "headers": [(n, v) for n, v in headers if n != b"cookie"]}
        return await self.application(scope, receive, send)
