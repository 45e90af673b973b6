"""The first authentication backend: refuses a locked-out (account, address)."""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend


class SignInThrottleBackend(AxesStandaloneBackend):
    """django-axes' check, for every sign-in that comes with its request: both sign-in
    pages and anything else that calls ``authenticate(request, ...)``. A call without
    a request (Django's test client ``login()``, scripts) has no address to count and
    goes on to the next backend unchecked; no HTTP path authenticates that way."""

    def authenticate(
        self, request: Any, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> Any:
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)
