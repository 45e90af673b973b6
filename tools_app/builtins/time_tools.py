"""``get_current_time`` and ``compare_time`` (T5), with MicroClaw's semantics.

Both answer in ``key: value`` lines the model can read back reliably. A timezone is
an IANA name (``Europe/Paris``, ``UTC``); when the model leaves it out, the run's
``ctx.extra["timezone"]`` (the user's or agent's zone) is used, else UTC. A bad name
is a tool error that suggests close matches, so the model can retry.
"""

from __future__ import annotations

import difflib
import functools
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from agents.engine.interfaces import READ_ONLY, RunContext
from tools_app.registry import TOOL_ERROR, Tool, ToolError

DEFAULT_TIMEZONE = "UTC"
MAX_TIMEZONE_CHARS = 64
MAX_TIMESTAMP_CHARS = 64
NOW = "now"


# ------------------------------------------------------------------------ timezones


@functools.cache
def _timezones_by_lower_name() -> dict[str, str]:
    # Scanning the zone database takes tens of milliseconds: only on the error path.
    return {name.lower(): name for name in available_timezones()}


def resolve_timezone(name: str) -> ZoneInfo:
    """The zone for an IANA name (case-insensitive); ``ToolError`` with suggestions if none."""
    name = name.strip()
    if name.upper() in {"UTC", "Z", "GMT"}:
        return ZoneInfo("UTC")
    if name and len(name) <= MAX_TIMEZONE_CHARS:
        try:
            return ZoneInfo(name)
        # ValueError: not a normalised key ("../x", "/etc/..."); OSError: a directory.
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
        known = _timezones_by_lower_name()
        exact = known.get(name.lower())
        if exact is not None:
            return ZoneInfo(exact)
        close = difflib.get_close_matches(name.lower(), known, n=3, cutoff=0.6)
        if not close:
            # "Tokyo" -> "Asia/Tokyo": match on the city part too.
            close = [k for k in known if k.rsplit("/", 1)[-1] == name.lower().replace(" ", "_")][:3]
        if close:
            suggestions = ", ".join(known[c] for c in close)
            raise ToolError(
                TOOL_ERROR,
                f"Invalid timezone: {name!r} is not an IANA timezone. Did you mean: {suggestions}?",
            )
    raise ToolError(
        TOOL_ERROR,
        f"Invalid timezone: {name[:MAX_TIMEZONE_CHARS]!r}. Use an IANA name such as 'UTC', "
        "'Europe/Paris', 'America/New_York' or 'Asia/Shanghai'.",
    )


def default_timezone_name(ctx: RunContext) -> str:
    """The timezone to use when the model names none: the run's, else UTC."""
    configured = ctx.extra.get("timezone")
    return configured if isinstance(configured, str) and configured.strip() else DEFAULT_TIMEZONE


def _timezone_for(args: dict[str, Any], ctx: RunContext) -> ZoneInfo:
    requested = args.get("timezone")
    if requested:
        return resolve_timezone(requested)
    try:
        return resolve_timezone(default_timezone_name(ctx))
    except ToolError:
        # A misconfigured default is not the model's fault: answer in UTC.
        return ZoneInfo(DEFAULT_TIMEZONE)


def _offset(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")[-6:]


def _number(value: float) -> str:
    """``3600`` rather than ``3600.0``; up to four decimals otherwise."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.4f}".rstrip("0").rstrip(".")


# ------------------------------------------------------------------ get_current_time


class GetCurrentTimeTool(Tool):
    """The current time in UTC and in a timezone."""

    name = "get_current_time"
    description = (
        "Get the current date and time, in UTC and in a timezone (local time, UTC offset, "
        "weekday, Unix seconds). Use it whenever the answer depends on today's date or the time."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "timezone": {
                "type": "string",
                "maxLength": MAX_TIMEZONE_CHARS,
                "description": "Optional IANA timezone, e.g. Asia/Shanghai. Defaults to the user's timezone, else UTC.",
            }
        },
        "additionalProperties": False,
    }
    traits = READ_ONLY
    timeout = 5.0
    max_output_chars = 2_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        zone = _timezone_for(args, ctx)
        now_utc = datetime.now(UTC)
        local = now_utc.astimezone(zone)
        return "\n".join(
            [
                f"timezone: {zone.key}",
                f"local_time: {local.isoformat(timespec='seconds')}",
                f"utc_offset: {_offset(local)}",
                f"weekday: {local.strftime('%A')}",
                f"utc_time: {now_utc.isoformat(timespec='seconds')}",
                f"unix_seconds: {int(now_utc.timestamp())}",
                f"unix_millis: {int(now_utc.timestamp() * 1000)}",
            ]
        )


# ---------------------------------------------------------------------- compare_time


def parse_timestamp(value: str, zone: tzinfo, *, now: datetime | None = None) -> datetime:
    """An aware datetime from ISO 8601 / RFC 3339 text, a date, or ``now``.

    Text without an offset is wall time in ``zone``; a wall time that does not exist
    (skipped by a DST change) or exists twice (repeated by one) is refused, since
    guessing would silently shift the answer by an hour.
    """
    text = value.strip()
    if text.lower() == NOW:
        return now or datetime.now(UTC)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ToolError(
            TOOL_ERROR,
            f"{text[:MAX_TIMESTAMP_CHARS]!r} is not a timestamp. Use ISO 8601 such as "
            "'2026-03-01T14:30:00+01:00', '2026-03-01 14:30', '2026-03-01', or 'now'.",
        ) from None
    if parsed.tzinfo is not None:
        return parsed
    aware = parsed.replace(tzinfo=zone)
    if aware.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != parsed:
        raise ToolError(
            TOOL_ERROR,
            f"{text!r} does not exist in {zone} (skipped by a daylight-saving change). "
            "Give the time with an explicit UTC offset.",
        )
    if aware.utcoffset() != aware.replace(fold=1).utcoffset():
        raise ToolError(
            TOOL_ERROR,
            f"{text!r} happens twice in {zone} (repeated by a daylight-saving change). "
            "Give the time with an explicit UTC offset.",
        )
    return aware


def describe_duration(delta: timedelta) -> str:
    """``2 days, 3 hours, 4 minutes, 5 seconds`` for the absolute value of ``delta``."""
    total = abs(delta)
    seconds = int(total.total_seconds())
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{count} {unit}{'' if count == 1 else 's'}"
        for count, unit in ((days, "day"), (hours, "hour"), (minutes, "minute"), (secs, "second"))
        if count
    ]
    return ", ".join(parts) or "0 seconds"


class CompareTimeTool(Tool):
    """Which of two times is earlier, and by how much."""

    name = "compare_time"
    description = (
        "Compare two timestamps or dates: which one is earlier and the difference between them "
        "(seconds, days and a readable form). Accepts ISO 8601 / RFC 3339 (with or without an "
        "offset), plain dates, and 'now'."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "left": {
                "type": "string",
                "maxLength": MAX_TIMESTAMP_CHARS,
                "description": "First timestamp, e.g. 2026-02-28T09:00:00Z, 2026-02-28 09:00, 2026-02-28 or now.",
            },
            "right": {
                "type": "string",
                "maxLength": MAX_TIMESTAMP_CHARS,
                "description": "Second timestamp, same formats as left.",
            },
            "timezone": {
                "type": "string",
                "maxLength": MAX_TIMEZONE_CHARS,
                "description": "IANA timezone for timestamps given without an offset. Defaults to the user's timezone, else UTC.",
            },
        },
        "required": ["left", "right"],
        "additionalProperties": False,
    }
    traits = READ_ONLY
    timeout = 5.0
    max_output_chars = 2_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        zone = _timezone_for(args, ctx)
        now = datetime.now(UTC)
        left = _side(args["left"], "left", zone, now)
        right = _side(args["right"], "right", zone, now)
        delta = right - left
        if delta > timedelta(0):
            relation, earlier = "left_is_earlier", "left"
        elif delta < timedelta(0):
            relation, earlier = "left_is_later", "right"
        else:
            relation, earlier = "equal", "neither"
        seconds = delta.total_seconds()
        hours, rest = divmod(int(abs(seconds)), 3_600)
        return "\n".join(
            [
                f"timezone_for_naive_input: {zone.key}",
                f"left_utc: {left.astimezone(UTC).isoformat()}",
                f"right_utc: {right.astimezone(UTC).isoformat()}",
                f"relation: {relation}",
                f"earlier: {earlier}",
                f"delta_seconds_right_minus_left: {int(seconds) if seconds.is_integer() else seconds}",
                f"delta_days_abs: {_number(abs(seconds) / 86_400)}",
                f"delta_hms_abs: {hours:02}:{rest // 60:02}:{rest % 60:02}",
                f"delta_readable: {describe_duration(delta)}",
            ]
        )


def _side(value: str, label: str, zone: tzinfo, now: datetime) -> datetime:
    try:
        # In UTC: subtracting two datetimes of the same zone would count wall-clock
        # time and get a day that crosses a DST change wrong by an hour.
        return parse_timestamp(value, zone, now=now).astimezone(UTC)
    except ToolError as exc:
        raise ToolError(exc.error_type, f"Invalid {label} timestamp: {exc.message}") from None
