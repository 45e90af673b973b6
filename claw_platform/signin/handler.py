"""django-axes' database handler with this product's two limits, its reset on success
and an audit event for each lock-out (``AXES_HANDLER``)."""

from __future__ import annotations

from typing import Any

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username
from axes.models import AccessAttempt
from django.contrib.auth import get_user_model

from claw_platform.audit.actions import record_audit_event
from claw_platform.signin.limits import current_lock, failures_on_the_account_scale


class SignInThrottleHandler(AxesDatabaseHandler):
    def get_failures(self, request: Any, credentials: dict[str, Any] | None = None) -> int:
        username = get_client_username(request, credentials)
        return failures_on_the_account_scale(username, request.axes_ip_address)

    def reset_user_attempts(self, request: Any, credentials: dict[str, Any] | None = None) -> int:
        # Only the (account, address) that signed in: clearing the address's count too
        # would let anyone with one account reset it between guesses at another.
        username = get_client_username(request, credentials)
        count, _ = AccessAttempt.objects.filter(
            username=username, ip_address=request.axes_ip_address
        ).delete()
        return int(count)

    def user_login_failed(
        self, sender: Any, credentials: dict[str, Any], request: Any = None, **kwargs: Any
    ) -> None:
        # With AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT off, the backend marks a
        # request it refused as locked out before this runs: such a request is an
        # attempt during a lock-out, not a new lock-out.
        was_locked = bool(getattr(request, "axes_locked_out", False))
        super().user_login_failed(sender, credentials, request, **kwargs)
        if request is None or was_locked or not getattr(request, "axes_locked_out", False):
            return
        username = get_client_username(request, credentials)
        lock = current_lock(username, request.axes_ip_address)
        user = get_user_model()._default_manager.filter(username=username).first() if username else None
        record_audit_event(
            action="auth.locked_out",
            actor=None,
            object_type="user",
            object_id=str(user.pk) if user is not None else "",
            object_repr=str(username or "")[:300],
            diff={
                "username": username,
                "address": request.axes_ip_address,
                "scope": lock.scope if lock else None,
                "locked_until": lock.until.isoformat() if lock else None,
                "path": request.axes_path_info,
            },
            ip=request.axes_ip_address,
        )
