"""Rate limits (X4), shared by every Daphne process: per key or member in one
statement (:mod:`claw_platform.api.rate_limit`); pairing and webhook sources with
DRF's throttles over the shared cache (``CLAW_CACHE_URL``: a PostgreSQL table by
default)."""

from __future__ import annotations

from typing import Any

from django.core.cache import cache
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from claw_platform.api.principal import Principal
from claw_platform.api.rate_limit import take
from claw_platform.client_address import client_address


def source_address(request: Any) -> str:
    return client_address(request) or "unknown"


class PrincipalRateThrottle(SimpleRateThrottle):
    """Every call of an API key (or a signed-in member) counts against its own budget
    (``CLAW_API_RATE``, 600/min by default), in one statement per call
    (:mod:`claw_platform.api.rate_limit`)."""

    scope = "principal"
    _wait: float | None = None

    def allow_request(self, request: Request, view: Any) -> bool:
        if self.rate is None:
            return True
        key = self.get_cache_key(request, view)
        if key is None:
            return True
        self._wait = take(key, int(self.num_requests or 0), float(self.duration or 0))
        return self._wait is None

    def wait(self) -> float | None:
        return self._wait

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        principal = request.auth
        if not isinstance(principal, Principal):
            return None
        ident = f"key{principal.api_key.pk}" if principal.api_key else f"user{principal.user.pk}"
        return self.cache_format % {"scope": self.scope, "ident": ident}


class PairRateThrottle(SimpleRateThrottle):
    """Pairing attempts per client address (``CLAW_PAIR_RATE``, ZeroClaw's 10/min)."""

    scope = "pair"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        return self.cache_format % {"scope": self.scope, "ident": source_address(request)}


class FixedRateThrottle(SimpleRateThrottle):
    """A throttle with its rate and key given at call time (webhook sources)."""

    def __init__(self, rate: str, key: str) -> None:
        self.rate = rate
        self.key = key
        self.num_requests, self.duration = self.parse_rate(rate)

    def get_cache_key(self, request: Request, view: Any) -> str:
        return f"throttle_{self.key}"


class LockOut:
    """Failures per client address; too many lock the address out for a while
    (pairing: ``CLAW_PAIR_MAX_FAILURES`` failures, ``CLAW_PAIR_LOCKOUT_SECONDS``)."""

    def __init__(self, name: str, ident: str, *, max_failures: int, lockout_seconds: int) -> None:
        self.failures_key = f"lockout_{name}_{ident}_failures"
        self.locked_key = f"lockout_{name}_{ident}_locked"
        self.max_failures = max_failures
        self.lockout_seconds = lockout_seconds

    def locked_for(self) -> float | None:
        """Seconds left of the lock-out, or None."""
        import time

        until = cache.get(self.locked_key)
        if until is None:
            return None
        left = float(until) - time.time()
        return left if left > 0 else None

    def fail(self) -> bool:
        """Count a failure; True when it locks the address out."""
        import time

        cache.add(self.failures_key, 0, self.lockout_seconds)
        try:
            failures = cache.incr(self.failures_key)
        except ValueError:  # expired between add and incr
            cache.set(self.failures_key, 1, self.lockout_seconds)
            failures = 1
        if failures >= self.max_failures:
            cache.set(self.locked_key, time.time() + self.lockout_seconds, self.lockout_seconds)
            cache.delete(self.failures_key)
            return True
        return False

    def succeed(self) -> None:
        cache.delete(self.failures_key)
