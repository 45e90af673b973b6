"""Per-server limits on MCP calls (T10): rate limit, concurrency cap, circuit breaker.

One :class:`ServerLimits` per MCP server and configuration, shared by every run in
the process (a limit per run would not protect the server), safe across threads and
event loops (worker loops, ``claw chat``, tests). Refusals carry MicroClaw's error
types: ``mcp_rate_limited`` (rate limit or concurrency cap, MicroClaw's "bulkhead")
and ``mcp_circuit_open``.

The circuit breaker counts consecutive *server* failures -- the connection failed,
the call timed out, the transport broke -- not tools that answered with an error. At
``failure_threshold`` it opens and refuses calls for ``cooldown`` seconds; then one
trial call goes through (half-open): success closes the circuit, failure opens it again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

Clock = Callable[[], float]


class RateLimiter:
    """Token bucket: ``per_minute`` calls a minute, bursts up to the same number."""

    def __init__(self, per_minute: int, *, clock: Clock = time.monotonic) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self._tokens = float(per_minute)
        self._stamp = clock()
        self._lock = threading.Lock()

    def try_acquire(self) -> bool:
        if self.per_minute <= 0:
            return True
        with self._lock:
            now = self.clock()
            self._tokens = min(
                float(self.per_minute), self._tokens + (now - self._stamp) * self.per_minute / 60
            )
            self._stamp = now
            if self._tokens >= 1:
                self._tokens -= 1
                return True
            return False


class Bulkhead:
    """At most ``limit`` calls in flight; one more is refused at once, not queued."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._in_flight = 0
        self._lock = threading.Lock()

    def try_enter(self) -> bool:
        with self._lock:
            if self._in_flight >= self.limit:
                return False
            self._in_flight += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)

    @property
    def in_flight(self) -> int:
        return self._in_flight


class CircuitBreaker:
    def __init__(self, failure_threshold: int, cooldown: float, *, clock: Clock = time.monotonic) -> None:
        self.failure_threshold = failure_threshold
        self.cooldown = cooldown
        self.clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._trial_running = False
        self._lock = threading.Lock()

    @property
    def state(self) -> str:
        with self._lock:
            if self._opened_at is None:
                return "closed"
            if self.clock() - self._opened_at >= self.cooldown:
                return "half_open"
            return "open"

    def retry_after(self) -> float:
        with self._lock:
            if self._opened_at is None:
                return 0.0
            return max(0.0, self.cooldown - (self.clock() - self._opened_at))

    def allow(self) -> bool:
        """May a call go through now? In half-open state only one trial at a time."""
        with self._lock:
            if self._opened_at is None:
                return True
            if self.clock() - self._opened_at < self.cooldown or self._trial_running:
                return False
            self._trial_running = True
            return True

    def record_success(self) -> None:
        with self._lock:
            self._failures = 0
            self._opened_at = None
            self._trial_running = False

    def record_failure(self) -> None:
        with self._lock:
            self._failures += 1
            if self._trial_running or self._failures >= self.failure_threshold:
                self._opened_at = self.clock()
            self._trial_running = False


@dataclass
class ServerLimits:
    rate: RateLimiter
    bulkhead: Bulkhead
    breaker: CircuitBreaker


_limits: dict[tuple[int, str], ServerLimits] = {}
_limits_lock = threading.Lock()


def server_limits(
    server_id: int,
    revision: str,
    *,
    rate_limit_per_minute: int,
    max_concurrency: int,
    failure_threshold: int,
    cooldown_seconds: float,
) -> ServerLimits:
    """The process-wide limits of one server's configuration (a changed row starts afresh)."""
    key = (server_id, revision)
    with _limits_lock:
        limits = _limits.get(key)
        if limits is None:
            for old in [k for k in _limits if k[0] == server_id]:
                del _limits[old]
            limits = _limits[key] = ServerLimits(
                RateLimiter(rate_limit_per_minute),
                Bulkhead(max_concurrency),
                CircuitBreaker(failure_threshold, cooldown_seconds),
            )
        return limits


def reset_server_limits() -> None:
    """Forget every server's limits (tests)."""
    with _limits_lock:
        _limits.clear()
