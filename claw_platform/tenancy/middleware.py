"""Sets the request's tenant (``request.tenant``, ``request.membership``) and the
tenant context for the rest of the request.

Sync and async: under ASGI an all-async middleware chain lets async views (the
OpenAI-compatible endpoint) and streamed responses wait without holding a thread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse

from claw_platform.db import db_async
from claw_platform.observability.logs import bind_ids, request_id_of, unbind
from claw_platform.tenancy.context import keep_scope_while_streaming, reset_scope, set_scope
from claw_platform.tenancy.lookup import active_membership

SESSION_TENANT_KEY = "claw_tenant_id"


class TenantMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        membership = None
        if request.user.is_authenticated:
            membership = active_membership(request.user, request.session.get(SESSION_TENANT_KEY))
        token = self._bind(request, membership)
        ids = bind_request_ids(request, membership)
        try:
            return keep_scope_while_streaming(self.get_response(request))
        finally:
            unbind(ids)
            reset_scope(token)

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        membership = None
        user = await request.auser()  # type: ignore[attr-defined]
        if user.is_authenticated:
            preferred = await sync_to_async(request.session.get)(SESSION_TENANT_KEY)
            membership = await db_async(active_membership)(user, preferred)
        token = self._bind(request, membership)
        ids = bind_request_ids(request, membership)
        try:
            response: Awaitable[HttpResponse] = self.get_response(request)
            return keep_scope_while_streaming(await response)  # type: ignore[no-any-return]
        finally:
            unbind(ids)
            reset_scope(token)

    @staticmethod
    def _bind(request: HttpRequest, membership: Any) -> object:
        request.membership = membership  # type: ignore[attr-defined]
        request.tenant = membership.tenant if membership else None  # type: ignore[attr-defined]
        return set_scope(membership.tenant_id if membership else None)


def bind_request_ids(request: HttpRequest, membership: Any) -> Any:
    """The ids every log line of this request carries (claw_platform/observability/logs.py)."""
    return bind_ids(
        request_id=request_id_of(request),
        tenant_id=membership.tenant_id if membership else None,
        user_id=membership.user_id if membership else None,
    )
