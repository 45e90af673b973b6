"""Scopes: a read key reads, a write key also converses (sessions, messages, runs,
approvals), an admin key also configures (agents, providers, models, keys, audit).
A member's role maps onto the same scopes (viewer: read, member: write, admin/owner:
admin)."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from claw_platform.api.principal import Principal


def required_scope(view: Any, method: str) -> str:
    if method in SAFE_METHODS:
        return str(getattr(view, "read_scope", "read"))
    return str(getattr(view, "write_scope", "write"))


class HasScope(BasePermission):
    message = "This key or role lacks the scope this call needs."

    def has_permission(self, request: Request, view: Any) -> bool:
        principal = request.auth
        if not isinstance(principal, Principal):
            return False
        scope = required_scope(view, request.method or "GET")
        if not principal.allows(scope):
            self.message = f"This call needs the {scope!r} scope."
            return False
        return True
