"""What the sign-in pages say and answer while an (account, address) is locked out."""

from __future__ import annotations

import math
from functools import wraps
from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponseBase
from django.utils import timezone

from claw_platform.signin.limits import ACCOUNT, Lock, current_lock


def lockout_message(lock: Lock) -> str:
    minutes = max(1, math.ceil(lock.seconds_left() / 60))
    when = timezone.localtime(lock.until).strftime("%H:%M %Z")
    who = "to this account from your address" if lock.scope == ACCOUNT else "from your address"
    return (
        f"Too many failed sign-ins {who}. Try again in {minutes} minute{'s' if minutes != 1 else ''} "
        f"(after {when})."
    )


class SignInThrottleFormMixin(forms.Form):
    """For AuthenticationForm subclasses: a refused sign-in during a lock-out says so,
    and when to try again, instead of "wrong password"."""

    request: HttpRequest | None

    def get_invalid_login_error(self) -> ValidationError:
        request = self.request
        if request is not None and getattr(request, "axes_locked_out", False):
            lock = current_lock(self.cleaned_data.get("username"), getattr(request, "axes_ip_address", None))
            if lock is not None:
                request.claw_signin_lock = lock  # type: ignore[attr-defined]
                return ValidationError(lockout_message(lock), code="locked_out")
        return super().get_invalid_login_error()  # type: ignore[misc,no-any-return]


class ChatAuthenticationForm(SignInThrottleFormMixin, AuthenticationForm):
    pass


def answer_lockout(request: HttpRequest, response: Any) -> Any:
    """A sign-in page shown again because of a lock-out: 429 with Retry-After."""
    lock: Lock | None = getattr(request, "claw_signin_lock", None)
    if lock is not None and isinstance(response, HttpResponseBase) and response.status_code == 200:
        response.status_code = 429
        response["Retry-After"] = str(lock.seconds_left())
    return response


def throttled_sign_in(view: Any) -> Any:
    """Wrap a sign-in view so a lock-out is answered 429 with Retry-After."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        return answer_lockout(request, view(request, *args, **kwargs))

    return wrapped
