"""Sets the request's tenant (``request.tenant``, ``request.membership``) and the
tenant context for the rest of the request."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from claw_platform.tenancy.context import reset_scope, set_scope
from claw_platform.tenancy.lookup import active_membership

SESSION_TENANT_KEY = "claw_tenant_id"


class TenantMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        membership = None
        if request.user.is_authenticated:
            membership = active_membership(request.user, request.session.get(SESSION_TENANT_KEY))
        request.membership = membership  # type: ignore[attr-defined]
        request.tenant = membership.tenant if membership else None  # type: ignore[attr-defined]
        token = set_scope(membership.tenant_id if membership else None)
        try:
            return self.get_response(request)
        finally:
            reset_scope(token)
