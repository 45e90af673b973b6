"""Django's stock middleware, with their hooks called on the event loop under ASGI.

Under ASGI, ``MiddlewareMixin`` runs every ``process_request``, ``process_view`` and
``process_response`` through ``sync_to_async``: one hand-off to the single
thread-sensitive executor thread and back per hook, about ten per request with the
stock list. On this product's 2-core reference machine those hand-offs were most of
the cost of a request (``/healthz``: 7 ms with them, 2.3 ms without any middleware).

The hooks below do no I/O except where noted, so they run inline. What can touch
the database still gets its thread: saving a modified session, and storing messages
that were added or read (their storage may fall back to the session). Each class
subclasses the stock one, so the admin's system checks and ``isinstance`` tests
still recognise it; under WSGI (and Django's test client) nothing changes.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware as StockAuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware as StockMessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware as StockSessionMiddleware
from django.http import HttpRequest, HttpResponseBase
from django.middleware.clickjacking import XFrameOptionsMiddleware as StockXFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware as StockCommonMiddleware
from django.middleware.csrf import CsrfViewMiddleware as StockCsrfViewMiddleware
from django.middleware.security import SecurityMiddleware as StockSecurityMiddleware


class InlineHooks:
    """Mixed into a stock ``MiddlewareMixin`` subclass: its hooks run on the event
    loop, except a ``process_response`` that :meth:`response_needs_thread` says may
    do I/O."""

    get_response: Any

    def runs_inline(self) -> bool:
        """False: behave exactly as the stock middleware (a hook may do I/O)."""
        return True

    def response_needs_thread(self, request: HttpRequest, response: HttpResponseBase) -> bool:
        return False

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        if not self.runs_inline():
            return await super().__acall__(request)  # type: ignore[misc,no-any-return]
        response = None
        process_request = getattr(self, "process_request", None)
        if process_request is not None:
            response = process_request(request)
        response = response or await self.get_response(request)
        process_response = getattr(self, "process_response", None)
        if process_response is not None:
            if self.response_needs_thread(request, response):
                response = await sync_to_async(process_response, thread_sensitive=True)(request, response)
            else:
                response = process_response(request, response)
        return response  # type: ignore[no-any-return]


class SecurityMiddleware(InlineHooks, StockSecurityMiddleware):
    pass


class SessionMiddleware(InlineHooks, StockSessionMiddleware):
    """The session store is created lazily (no query); only saving it writes."""

    def response_needs_thread(self, request: HttpRequest, response: HttpResponseBase) -> bool:
        session = getattr(request, "session", None)
        return session is not None and (session.modified or settings.SESSION_SAVE_EVERY_REQUEST)


class CommonMiddleware(InlineHooks, StockCommonMiddleware):
    pass


class CsrfViewMiddleware(InlineHooks, StockCsrfViewMiddleware):
    """The token comes from a cookie unless ``CSRF_USE_SESSIONS`` is on: no I/O.
    Django adapts a synchronous ``process_view`` with a thread hop, so under ASGI an
    async one is installed that calls it inline."""

    def __init__(self, get_response: Any) -> None:
        super().__init__(get_response)
        if getattr(self, "async_mode", False) and self.runs_inline():
            sync_process_view = super().process_view

            async def process_view(request: HttpRequest, callback: Any, args: Any, kwargs: Any) -> Any:
                return sync_process_view(request, callback, args, kwargs)

            self.process_view = process_view  # type: ignore[method-assign,assignment]

    def runs_inline(self) -> bool:
        return not settings.CSRF_USE_SESSIONS


class AuthenticationMiddleware(InlineHooks, StockAuthenticationMiddleware):
    """Only sets ``request.user`` (lazy) and ``request.auser``: no query here."""


class MessageMiddleware(InlineHooks, StockMessageMiddleware):
    def response_needs_thread(self, request: HttpRequest, response: HttpResponseBase) -> bool:
        storage = getattr(request, "_messages", None)
        return storage is not None and (storage.used or storage.added_new)


class XFrameOptionsMiddleware(InlineHooks, StockXFrameOptionsMiddleware):
    pass
