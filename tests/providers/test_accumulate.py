"""P1/P2 — StreamAccumulator and collect: events in, one assistant message out."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agents.engine.types import (
    Completed,
    ProviderError,
    ProviderEvent,
    ReasoningPart,
    TextDelta,
    TextPart,
    ThinkingDelta,
    ToolCallPart,
    ToolUseDelta,
    ToolUseStart,
    ToolUseStop,
    Usage,
)
from agents.providers.accumulate import (
    RAW_ARGUMENTS_KEY,
    StreamAccumulator,
    collect,
    has_invalid_arguments,
)


def accumulate(events: list[ProviderEvent]) -> StreamAccumulator:
    acc = StreamAccumulator()
    for event in events:
        acc.add(event)
    return acc


def test_p1_parts_come_in_order_reasoning_text_tools():
    """P1/P2: reasoning first, then joined text, then tool calls in start order."""
    acc = accumulate(
        [
            ThinkingDelta("I should "),
            ThinkingDelta("look."),
            ThinkingDelta("", signature="s1"),
            TextDelta("Let me "),
            ToolUseStart(2, "t2", "second"),
            ToolUseDelta(2, '{"b":'),
            TextDelta("check."),
            ToolUseDelta(2, " 2}"),
            ToolUseStop(2),
            ToolUseStart(1, "t1", "first"),
            ToolUseStop(1),
            Completed("tool_use", Usage(1, 2, 3, 4), "model-x"),
        ]
    )
    assert acc.message.role == "assistant"
    assert acc.message.parts == [
        ReasoningPart("I should look.", signature="s1"),
        TextPart("Let me check."),
        ToolCallPart("t2", "second", {"b": 2}),
        ToolCallPart("t1", "first", {}),
    ]
    assert acc.stop_reason == "tool_use"
    assert acc.usage == Usage(1, 2, 3, 4)
    assert acc.model == "model-x"
    assert acc.completed


def test_p1_each_signed_thinking_block_is_its_own_part():
    """P1: Anthropic signatures belong to one block each and must be echoed with it."""
    acc = accumulate(
        [
            ThinkingDelta("one"),
            ThinkingDelta("", signature="s1"),
            ThinkingDelta("two", signature="s2"),
            Completed("end_turn", Usage()),
        ]
    )
    assert acc.message.parts == [ReasoningPart("one", "s1"), ReasoningPart("two", "s2")]


def test_p2_unsigned_reasoning_is_one_part():
    """P2: reasoning_content deltas (no signature) join into one reasoning part."""
    acc = accumulate([ThinkingDelta("a"), ThinkingDelta("b"), TextDelta("c"), Completed("end_turn", Usage())])
    assert acc.message.parts == [ReasoningPart("ab"), TextPart("c")]


def test_p1_invalid_tool_json_is_kept_raw_and_flagged():
    """P1/P2: unparseable arguments -> {"_raw": text} plus a flag for the loop."""
    acc = accumulate(
        [
            ToolUseStart(0, "bad", "bash"),
            ToolUseDelta(0, '{"cmd": "ls'),
            ToolUseStop(0),
            ToolUseStart(1, "list", "bash"),
            ToolUseDelta(1, "[1, 2]"),
            ToolUseStop(1),
            ToolUseStart(2, "good", "bash"),
            ToolUseDelta(2, '{"cmd": "ls"}'),
            ToolUseStop(2),
            Completed("tool_use", Usage()),
        ]
    )
    bad, not_object, good = acc.message.tool_calls
    assert bad.arguments == {RAW_ARGUMENTS_KEY: '{"cmd": "ls'}
    assert not_object.arguments == {RAW_ARGUMENTS_KEY: "[1, 2]"}
    assert has_invalid_arguments(bad)
    assert has_invalid_arguments(not_object)
    assert not has_invalid_arguments(good)
    assert set(acc.invalid_tool_calls) == {"bad", "list"}


def test_p1_empty_tool_input_means_no_arguments():
    """P1/P2: a tool without parameters may stream no input at all (or "null")."""
    acc = accumulate(
        [
            ToolUseStart(0, "a", "now"),
            ToolUseStop(0),
            ToolUseStart(1, "b", "now"),
            ToolUseDelta(1, "null"),
            ToolUseStop(1),
            Completed("tool_use", Usage()),
        ]
    )
    assert [c.arguments for c in acc.message.tool_calls] == [{}, {}]
    assert acc.invalid_tool_calls == {}


def test_p1_events_after_completion_or_for_unknown_tools_raise():
    """P1/P2: protocol violations are ProviderErrors, not silent corruption."""
    acc = accumulate([Completed("end_turn", Usage())])
    with pytest.raises(ProviderError):
        acc.add(TextDelta("late"))
    with pytest.raises(ProviderError):
        StreamAccumulator().add(ToolUseDelta(5, "{}"))


async def test_p1_collect_builds_a_response_and_requires_completion():
    """P1/P2: collect drains a stream; a stream without Completed is an error."""

    async def stream(events: list[ProviderEvent]) -> AsyncIterator[ProviderEvent]:
        for event in events:
            yield event

    response = await collect(stream([TextDelta("hi"), Completed("end_turn", Usage(3, 4))]))
    assert response.message.text == "hi"
    assert response.stop_reason == "end_turn"
    assert response.usage == Usage(3, 4)

    with pytest.raises(ProviderError) as info:
        await collect(stream([TextDelta("cut")]))
    assert info.value.kind == "stream"
