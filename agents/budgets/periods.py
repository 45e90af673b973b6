"""When a budget's period began and when it resets, in the tenant's time zone.

A day starts at the tenant's midnight, a week on its Monday, a month on the 1st;
``none`` never resets. Returned datetimes are aware (UTC-comparable).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.utils import timezone as dj_timezone


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def is_valid_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def period_bounds(
    period: str, now: datetime | None = None, tz: str = "UTC"
) -> tuple[datetime | None, datetime | None]:
    """``(start, reset_at)`` of the period containing ``now``; ``(None, None)`` for none."""
    if period == "none":
        return None, None
    local = (now or dj_timezone.now()).astimezone(zone(tz))
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        start, end = midnight, midnight + timedelta(days=1)
    elif period == "week":
        start = midnight - timedelta(days=midnight.weekday())
        end = start + timedelta(days=7)
    else:  # month
        start = midnight.replace(day=1)
        end = (
            start.replace(year=start.year + 1, month=1)
            if start.month == 12
            else start.replace(month=start.month + 1)
        )
    # Re-attach the zone so a DST change inside the period lands on local midnight.
    return _local(start, tz), _local(end, tz)


def _local(value: datetime, tz: str) -> datetime:
    return value.replace(tzinfo=None).replace(tzinfo=zone(tz))


def hour_start(now: datetime) -> datetime:
    return now.replace(minute=0, second=0, microsecond=0)
