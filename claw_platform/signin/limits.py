"""Whether an (account, address) is locked out, and until when, from axes' rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from axes.models import AccessAttempt
from django.conf import settings
from django.utils import timezone

ACCOUNT = "account"  # this account from this address
ADDRESS = "address"  # every account from this address


@dataclass(frozen=True)
class Lock:
    until: datetime
    scope: str

    def seconds_left(self, now: datetime | None = None) -> int:
        left = (self.until - (now or timezone.now())).total_seconds()
        return max(1, int(left + 0.999))


def cool_off() -> timedelta:
    return timedelta(seconds=settings.CLAW_SIGNIN_LOCKOUT_SECONDS)


def _recent(address: str | None, now: datetime) -> list[tuple[str | None, int, datetime]]:
    """Failures from ``address`` still inside the window, newest first (one query)."""
    rows = AccessAttempt.objects.filter(ip_address=address, attempt_time__gte=now - cool_off())
    return list(
        rows.order_by("-attempt_time").values_list("username", "failures_since_start", "attempt_time")
    )


def account_limit(request: Any = None, credentials: Any = None) -> int:
    """``AXES_FAILURE_LIMIT``: failures of one account from one address."""
    return int(settings.CLAW_SIGNIN_MAX_FAILURES)


def _limits() -> tuple[tuple[str, int], ...]:
    return (
        (ACCOUNT, settings.CLAW_SIGNIN_MAX_FAILURES),
        (ADDRESS, settings.CLAW_SIGNIN_MAX_FAILURES_PER_ADDRESS),
    )


def current_lock(username: str | None, address: str | None, now: datetime | None = None) -> Lock | None:
    """The lock-out in force for this account from this address, if any: the latest to
    end of the account's and the address's. A window's failures, newest first, reach
    the limit at some row; the lock lasts until that row is older than the cool-off."""
    now = now or timezone.now()
    rows = _recent(address, now)
    series = {ACCOUNT: [r for r in rows if r[0] == username], ADDRESS: rows}
    locks = []
    for scope, limit in _limits():
        total = 0
        for _username, failures, when in series[scope]:
            total += failures
            if total >= limit:
                locks.append(Lock(when + cool_off(), scope))
                break
    return max(locks, key=lambda lock: lock.until) if locks else None


def failures_on_the_account_scale(username: str | None, address: str | None) -> int:
    """For django-axes, which compares one number with one limit
    (``AXES_FAILURE_LIMIT`` = ``CLAW_SIGNIN_MAX_FAILURES``): the account's failures from
    this address, or the address's failures shifted so that reaching the looser
    per-address limit reaches the account limit, whichever is nearer its limit."""
    rows = _recent(address, timezone.now())
    account = sum(failures for name, failures, _when in rows if name == username)
    address_total = sum(failures for _name, failures, _when in rows)
    shifted = (
        address_total - settings.CLAW_SIGNIN_MAX_FAILURES_PER_ADDRESS + settings.CLAW_SIGNIN_MAX_FAILURES
    )
    return max(account, shifted, 0)
