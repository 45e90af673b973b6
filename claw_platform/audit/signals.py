"""Sign-ins and failed sign-ins are security events (O3)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver

from claw_platform.audit.actions import client_ip, record_audit_event


@receiver(user_logged_in)
def _signed_in(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    record_audit_event(action="auth.sign_in", actor=user, ip=client_ip(request) if request else None)


@receiver(user_login_failed)
def _sign_in_failed(sender: Any, credentials: dict[str, Any], request: Any = None, **kwargs: Any) -> None:
    username = str(credentials.get("username", ""))[:150]
    record_audit_event(
        action="auth.sign_in_failed",
        actor=None,
        object_type="user",
        object_repr=username,
        ip=client_ip(request) if request else None,
    )
