"""When a routine is due (C1).

Cron expressions are walked in the routine's wall-clock time (croniter on naive
local times) and each wall time is placed on the UTC line by :func:`wall_to_utc`:
a time that does not exist (spring forward: 02:30) runs at the end of the gap
(03:00), a time that exists twice (fall back: 01:30) runs at its first occurrence,
so a daily job runs exactly once on both DST change days.
"""

from __future__ import annotations

import hashlib
import zoneinfo
from datetime import UTC, datetime, timedelta

from croniter import croniter

MAX_CRON_STEPS = 20_000  # a walk over one catch-up window of an every-minute cron


def zone_of(name: str) -> zoneinfo.ZoneInfo:
    return zoneinfo.ZoneInfo(name)


def wall_to_utc(naive: datetime, zone: zoneinfo.ZoneInfo) -> datetime:
    """The UTC instant of local wall time ``naive``: its first occurrence when it
    exists twice, the end of the gap when it does not exist."""
    first = naive.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if first.astimezone(zone).replace(tzinfo=None) == naive:
        return first
    # In a gap: fold=1 reads it with the offset after the change, fold=0 with the
    # one before; the change lies between those two instants.
    low = naive.replace(tzinfo=zone, fold=1).astimezone(UTC)
    high = first
    if low > high:
        low, high = high, low
    before = low.astimezone(zone).utcoffset()
    while (high - low) > timedelta(seconds=1):
        middle = low + (high - low) / 2
        if middle.astimezone(zone).utcoffset() == before:
            low = middle
        else:
            high = middle
    return high.replace(microsecond=0)


def next_cron(expression: str, zone_name: str, after: datetime) -> datetime:
    """The first firing of ``expression`` strictly after ``after`` (aware), in UTC."""
    zone = zone_of(zone_name)
    walker = croniter(expression, after.astimezone(zone).replace(tzinfo=None))
    for _ in range(MAX_CRON_STEPS):
        candidate = wall_to_utc(walker.get_next(datetime), zone)
        if candidate > after:
            return candidate
    raise ValueError(f"cron {expression!r} has no firing after {after.isoformat()}")


def stable_fraction(key: str) -> float:
    """A number in [0, 1) that is always the same for ``key``."""
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def jitter_offset(routine_id: int, jitter_seconds: int) -> timedelta:
    """The routine's own delay within its jitter: the same every time (C1)."""
    if jitter_seconds <= 0:
        return timedelta(0)
    return timedelta(seconds=round(stable_fraction(f"routine-jitter:{routine_id}") * jitter_seconds, 3))


def stagger_offset(routine_id: int, spread_seconds: float) -> timedelta:
    """Where a catch-up fire starts within the spread after a restart."""
    if spread_seconds <= 0:
        return timedelta(0)
    return timedelta(seconds=round(stable_fraction(f"routine-stagger:{routine_id}") * spread_seconds, 3))


def retry_delay(routine_id: int, attempt: int, base_seconds: int, *, cap_seconds: int = 3_600) -> timedelta:
    """Exponential backoff with jitter (C4): base * 2^(attempt-1), plus up to a
    quarter more, bounded by ``cap_seconds``."""
    base = min(base_seconds * 2 ** max(attempt - 1, 0), cap_seconds)
    spread = stable_fraction(f"routine-retry:{routine_id}:{attempt}") * base / 4
    return timedelta(seconds=min(base + spread, cap_seconds))
