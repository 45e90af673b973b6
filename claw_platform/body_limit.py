"""Request body caps on the bytes actually received, whatever the framing.

Views used to compare the ``Content-Length`` header with their cap, after Django's
ASGI handler had already read the whole body: a chunked body (no length) or a lying
length went through, and a large one was buffered whole before anything looked.
:class:`BodyLimitMiddleware` sits in front of Django and counts the body's bytes as
they arrive; past the route's cap it stops reading, Django sees the client leave,
and the client gets 413 in the route's error shape. A declared length over the cap
is refused before a byte of the body is read.

The cap is the route's own: a view's ``max_body_bytes`` (webhooks 64 KB, pairing
4 KB), else ``CLAW_API_MAX_BODY_BYTES`` under /api/ and /v1/, Django's
``DATA_UPLOAD_MAX_MEMORY_SIZE`` in the admin, and :data:`PAGE_MAX_BODY_BYTES` for the
chat pages' forms and anything else.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from django.conf import settings
from django.urls import Resolver404, resolve

from claw_platform.api.errors import error_body, openai_error_body

# The chat pages' forms (sign in, new chat, switch team) and any other page.
PAGE_MAX_BODY_BYTES = 64 * 1024
API_PREFIXES = ("/api/", "/v1/")
# How long a refused body is still read (and dropped) so the client gets the 413.
LINGER_SECONDS = 5.0


def body_cap(path: str) -> int:
    """The most bytes a request body to ``path`` may have."""
    api = path.startswith(API_PREFIXES)
    try:
        match = resolve(path)
    except Resolver404:
        return int(settings.CLAW_API_MAX_BODY_BYTES) if api else PAGE_MAX_BODY_BYTES
    view = match.func
    view_class = getattr(view, "view_class", None) or getattr(view, "cls", None)
    declared = getattr(view, "max_body_bytes", None) or getattr(view_class, "max_body_bytes", None)
    if callable(declared):
        declared = declared()  # a cap read from the settings at request time
    if declared:
        return int(declared)
    if api:
        return int(settings.CLAW_API_MAX_BODY_BYTES)
    if "admin" in match.app_names:
        return int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE or settings.CLAW_API_MAX_BODY_BYTES)
    return PAGE_MAX_BODY_BYTES


def too_large_response(path: str, cap: int) -> tuple[str, bytes]:
    """(content type, body) of the 413 for ``path``: the API's error shape, OpenAI's
    under /v1/, plain text elsewhere."""
    message = f"The request body is over {cap:,} bytes."
    if path.startswith("/v1/"):
        body = openai_error_body(message, "invalid_request_error", "payload_too_large")
    elif path.startswith("/api/"):
        body = error_body("payload_too_large", message)
    else:
        return "text/plain; charset=utf-8", message.encode()
    return "application/json", json.dumps(body).encode()


def _declared_length(scope: dict[str, Any]) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyLimitMiddleware:
    """ASGI middleware for HTTP: the route's body cap on the bytes received."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        root = scope.get("root_path") or ""
        if root and path.startswith(root):
            path = path[len(root) :] or "/"
        declared = _declared_length(scope)
        cap: int | None = None
        if declared:
            cap = body_cap(path)
            if declared > cap:
                await _drain(receive)
                await _refuse(send, path, cap)
                return
        received = 0
        over = False
        started = False

        async def counted_receive() -> dict[str, Any]:
            nonlocal received, over, cap
            if over:
                return {"type": "http.disconnect"}
            message: dict[str, Any] = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received:
                    if cap is None:
                        cap = body_cap(path)
                    if received > cap:
                        # Django stops reading and answers nothing (the client
                        # "left"); the 413 is sent below.
                        over = True
                        return {"type": "http.disconnect"}
            return message

        async def watched_send(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, counted_receive, watched_send)
        if over and not started:
            assert cap is not None
            await _drain(receive)
            await _refuse(send, path, cap)


async def _drain(receive: Any) -> None:
    """Read (and drop) what the client still sends, for at most LINGER_SECONDS, before
    answering: a client that sends its whole body before reading the answer (most
    do) would otherwise find the connection reset under it and never see the 413."""
    deadline = time.monotonic() + LINGER_SECONDS
    while (left := deadline - time.monotonic()) > 0:
        try:
            message = await asyncio.wait_for(receive(), left)
        except TimeoutError:
            return
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


async def _refuse(send: Any, path: str, cap: int) -> None:
    content_type, body = too_large_response(path, cap)
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", content_type.encode()),
                (b"content-length", str(len(body)).encode()),
                # The rest of the body is never read: the connection cannot be reused.
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def install_daphne_body_caps() -> None:
    """Apply the caps inside Daphne too, as the body arrives (once per process).

    Twisted, under Daphne, receives a request's whole body (into a temporary file
    past 100 KB) before the application hears of the request, so the middleware
    alone still let a client upload gigabytes to the server's disk, and a declared
    length the client never sends kept a connection waiting for it. Here Daphne's
    request refuses a declared length over the route's cap as soon as the headers
    are in, and stops a body (chunked or not) at the cap, answering the same 413.
    The middleware stays: it is what holds under any other ASGI server."""
    from daphne.http_protocol import WebRequest

    if getattr(WebRequest, "_claw_body_caps", False):
        return
    got_length = WebRequest.gotLength
    handle_chunk = WebRequest.handleContentChunk
    process = WebRequest.process

    def capped_got_length(self: Any, length: int | None) -> None:
        got_length(self, length)
        self._claw_received = 0
        self._claw_refused = False
        target = getattr(self.channel, "_path", None)  # the request line's target (Twisted)
        self._claw_path = _path_of(target) if isinstance(target, bytes) and length != 0 else None
        # None (chunked) or a length: the route's cap. No body (most requests): none.
        self._claw_cap = body_cap(self._claw_path) if self._claw_path is not None else None
        if self._claw_cap is not None and length is not None and length > self._claw_cap:
            _refuse_in_daphne(self)

    def capped_chunk(self: Any, data: bytes) -> None:
        if getattr(self, "_claw_refused", False):
            return
        cap = getattr(self, "_claw_cap", None)
        if cap is not None:
            self._claw_received += len(data)
            if self._claw_received > cap:
                _refuse_in_daphne(self)
                return
        handle_chunk(self, data)

    def capped_process(self: Any) -> Any:
        if getattr(self, "_claw_refused", False):
            _close_refused(self)  # the refused body has ended: the 413 is out
            return None
        return process(self)

    WebRequest.gotLength = capped_got_length  # type: ignore[method-assign]
    WebRequest.handleContentChunk = capped_chunk  # type: ignore[method-assign]
    WebRequest.process = capped_process  # type: ignore[method-assign]
    WebRequest._claw_body_caps = True  # type: ignore[attr-defined]


def _path_of(target: bytes) -> str | None:
    from urllib.parse import unquote

    try:
        return unquote(target.split(b"?", 1)[0].decode("ascii")) or "/"
    except UnicodeDecodeError:
        return None  # Daphne answers 400 for it anyway


def _refuse_in_daphne(request: Any) -> None:
    """Answer 413 at once; the rest of the body is read and dropped until it ends
    (``capped_process`` then closes) or for LINGER_SECONDS, so a client still sending
    is not reset before it reads the answer."""
    from twisted.internet import reactor

    request._claw_refused = True
    content_type, body = too_large_response(request._claw_path, request._claw_cap)
    head = (
        "HTTP/1.1 413 Request Entity Too Large\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    channel = request.channel
    if channel is not None and channel.transport is not None:
        channel.transport.write(head.encode() + body)
        request._claw_linger = reactor.callLater(LINGER_SECONDS, _close_refused, request)  # type: ignore[attr-defined,arg-type]


def _close_refused(request: Any) -> None:
    linger = getattr(request, "_claw_linger", None)
    if linger is not None and linger.active():
        linger.cancel()
    channel = request.channel
    if channel is not None and channel.transport is not None:
        channel.loseConnection()
