"""get_current_time and compare_time (T5), run through the registry executor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agents.engine.interfaces import READ_ONLY, RunContext
from agents.engine.types import ToolCallPart, ToolResultPart
from tools_app.builtins.time_tools import CompareTimeTool, GetCurrentTimeTool, describe_duration
from tools_app.registry import INVALID_ARGUMENTS, TOOL_ERROR, Registry, RegistryToolExecutor

TOOLS = RegistryToolExecutor(Registry("builtin", [GetCurrentTimeTool(), CompareTimeTool()]), role="viewer")


async def run(name: str, ctx: RunContext | None = None, **arguments: Any) -> ToolResultPart:
    return await TOOLS.execute(ToolCallPart("c1", name, arguments), ctx or RunContext())


def fields(result: ToolResultPart) -> dict[str, str]:
    assert not result.is_error, result.content
    return dict(line.split(": ", 1) for line in result.content.splitlines())


def test_t5_time_tools_are_read_only_low_risk_and_offered_to_viewers() -> None:
    assert GetCurrentTimeTool.traits == READ_ONLY
    assert CompareTimeTool.traits.risk == "low"
    assert [d.name for d in TOOLS.definitions()] == ["get_current_time", "compare_time"]


# ------------------------------------------------------------------ get_current_time


async def test_t5_current_time_defaults_to_utc() -> None:
    before = datetime.now(UTC)
    out = fields(await run("get_current_time"))
    assert out["timezone"] == "UTC"
    assert out["utc_offset"] == "+00:00"
    utc = datetime.fromisoformat(out["utc_time"])
    assert before - timedelta(seconds=2) <= utc <= datetime.now(UTC) + timedelta(seconds=1)
    assert abs(int(out["unix_seconds"]) - before.timestamp()) < 3
    assert int(out["unix_millis"]) // 1000 == int(out["unix_seconds"])


async def test_t5_current_time_in_a_named_timezone() -> None:
    out = fields(await run("get_current_time", timezone="Asia/Shanghai"))
    assert out["timezone"] == "Asia/Shanghai"
    assert out["utc_offset"] == "+08:00"  # no DST in China
    local = datetime.fromisoformat(out["local_time"])
    utc = datetime.fromisoformat(out["utc_time"])
    assert local == utc
    assert out["weekday"] == local.strftime("%A")


async def test_t5_current_time_defaults_to_the_runs_timezone() -> None:
    out = fields(await run("get_current_time", RunContext(extra={"timezone": "America/New_York"})))
    assert out["timezone"] == "America/New_York"
    assert out["utc_offset"] in {"-05:00", "-04:00"}


async def test_t5_a_misconfigured_run_timezone_falls_back_to_utc() -> None:
    out = fields(await run("get_current_time", RunContext(extra={"timezone": "Mars/Olympus"})))
    assert out["timezone"] == "UTC"


async def test_t5_timezone_names_are_matched_without_regard_to_case() -> None:
    assert fields(await run("get_current_time", timezone="europe/paris"))["timezone"] == "Europe/Paris"
    assert fields(await run("get_current_time", timezone="utc"))["timezone"] == "UTC"


async def test_t5_an_invalid_timezone_is_an_error_that_suggests_a_fix() -> None:
    result = await run("get_current_time", timezone="Asia/Tokio")
    assert result.is_error
    assert result.error_type == TOOL_ERROR
    assert "Invalid timezone: 'Asia/Tokio'" in result.content
    assert "Did you mean: Asia/Tokyo" in result.content


async def test_t5_a_bare_city_name_suggests_its_iana_zone() -> None:
    result = await run("get_current_time", timezone="Tokyo")
    assert result.error_type == TOOL_ERROR
    assert "Asia/Tokyo" in result.content


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/localtime", "America", "+05:30", "Nowhere"])
async def test_t5_timezone_names_that_are_paths_or_not_zones_are_refused(name: str) -> None:
    result = await run("get_current_time", timezone=name)
    assert result.is_error
    assert result.error_type == TOOL_ERROR
    assert "Invalid timezone" in result.content
    assert "root:" not in result.content


async def test_t5_current_time_rejects_unknown_arguments() -> None:
    result = await run("get_current_time", tz="UTC")
    assert result.error_type == INVALID_ARGUMENTS
    assert "'tz' was unexpected" in result.content


# ---------------------------------------------------------------------- compare_time


async def test_t5_compare_time_reports_which_is_earlier_and_by_how_much() -> None:
    out = fields(await run("compare_time", left="2026-02-28T00:00:00Z", right="2026-02-28T01:00:00Z"))
    assert out["relation"] == "left_is_earlier"
    assert out["earlier"] == "left"
    assert out["delta_seconds_right_minus_left"] == "3600"
    assert out["delta_hms_abs"] == "01:00:00"
    assert out["delta_readable"] == "1 hour"
    assert out["left_utc"] == "2026-02-28T00:00:00+00:00"


async def test_t5_compare_time_when_the_left_is_later() -> None:
    out = fields(await run("compare_time", left="2026-03-03", right="2026-03-01T12:00:00+00:00"))
    assert out["relation"] == "left_is_later"
    assert out["earlier"] == "right"
    assert out["delta_seconds_right_minus_left"] == str(-36 * 3600)
    assert out["delta_days_abs"] == "1.5"
    assert out["delta_readable"] == "1 day, 12 hours"


async def test_t5_compare_time_equal_instants_in_different_offsets() -> None:
    out = fields(await run("compare_time", left="2026-06-01T14:00:00+02:00", right="2026-06-01T12:00:00Z"))
    assert out["relation"] == "equal"
    assert out["earlier"] == "neither"
    assert out["delta_readable"] == "0 seconds"


async def test_t5_times_without_offset_are_read_in_the_given_timezone() -> None:
    out = fields(
        await run(
            "compare_time", left="2026-01-15 09:00", right="2026-01-15T08:00:00Z", timezone="Europe/Paris"
        )
    )
    assert out["timezone_for_naive_input"] == "Europe/Paris"
    assert out["left_utc"] == "2026-01-15T08:00:00+00:00"
    assert out["relation"] == "equal"


async def test_t5_times_without_offset_default_to_the_runs_timezone() -> None:
    ctx = RunContext(extra={"timezone": "Asia/Kolkata"})
    out = fields(await run("compare_time", ctx, left="2026-01-15 05:30", right="2026-01-15T00:00:00Z"))
    assert out["relation"] == "equal"


async def test_t5_compare_time_across_a_dst_change_counts_real_elapsed_time() -> None:
    # Europe/Paris moved clocks forward at 02:00 on 2026-03-29: 24 wall hours are 23 real ones.
    out = fields(
        await run("compare_time", left="2026-03-28 12:00", right="2026-03-29 12:00", timezone="Europe/Paris")
    )
    assert out["delta_seconds_right_minus_left"] == str(23 * 3600)


async def test_t5_a_wall_time_skipped_by_dst_is_refused() -> None:
    result = await run("compare_time", left="2026-03-29 02:30", right="now", timezone="Europe/Paris")
    assert result.error_type == TOOL_ERROR
    assert "Invalid left timestamp" in result.content
    assert "does not exist" in result.content


async def test_t5_a_wall_time_repeated_by_dst_is_refused() -> None:
    result = await run("compare_time", left="now", right="2026-10-25 02:30", timezone="Europe/Paris")
    assert result.error_type == TOOL_ERROR
    assert "Invalid right timestamp" in result.content
    assert "happens twice" in result.content


async def test_t5_compare_time_accepts_now() -> None:
    out = fields(await run("compare_time", left="now", right="2000-01-01"))
    assert out["relation"] == "left_is_later"


async def test_t5_an_unreadable_timestamp_is_an_error_naming_the_side_and_formats() -> None:
    result = await run("compare_time", left="2026-02-28", right="next tuesday")
    assert result.error_type == TOOL_ERROR
    assert "Invalid right timestamp: 'next tuesday' is not a timestamp" in result.content
    assert "ISO 8601" in result.content


async def test_t5_compare_time_requires_both_sides() -> None:
    result = await run("compare_time", left="2026-02-28")
    assert result.error_type == INVALID_ARGUMENTS
    assert "'right' is a required property" in result.content


async def test_t5_compare_time_with_an_invalid_timezone() -> None:
    result = await run("compare_time", left="2026-02-28", right="2026-03-01", timezone="Europe/Pariss")
    assert result.error_type == TOOL_ERROR
    assert "Europe/Paris" in result.content


def test_t5_durations_read_naturally() -> None:
    assert (
        describe_duration(timedelta(days=2, hours=3, minutes=4, seconds=5))
        == "2 days, 3 hours, 4 minutes, 5 seconds"
    )
    assert describe_duration(timedelta(seconds=-61)) == "1 minute, 1 second"
