"""P4 — requests repaired before sending (pure function tests)."""

from __future__ import annotations

import copy

from agents.engine.types import (
    FinishPart,
    ImagePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from agents.providers.repair import (
    LEADING_USER_TEXT,
    SYNTHETIC_RESULT_ERROR_TYPE,
    repair_messages,
)


def call(call_id: str, name: str = "bash") -> ToolCallPart:
    return ToolCallPart(call_id, name, {})


def result(call_id: str, content: str = "ok") -> ToolResultPart:
    return ToolResultPart(call_id, "bash", content)


def roles(messages: list[Message]) -> list[str]:
    return [m.role for m in messages]


def test_p4_valid_history_is_unchanged():
    """P4: a well-formed conversation passes through as is."""
    history = [
        Message.user("hi"),
        Message("assistant", [TextPart("looking"), call("a"), call("b")]),
        Message("tool", [result("a"), result("b")]),
        Message.assistant("done"),
        Message("user", [TextPart("and this?"), ImagePart("image/png", "AAAA")]),
    ]
    assert repair_messages(history) == history


def test_p4_orphaned_tool_results_are_dropped():
    """P4: results with no matching call in the preceding assistant message go."""
    history = [
        Message("tool", [result("ghost")]),  # leading orphan
        Message.user("hi"),
        Message("assistant", [call("a")]),
        Message("tool", [result("a"), result("old")]),
        Message.assistant("done"),
    ]
    repaired = repair_messages(history)
    assert roles(repaired) == ["user", "assistant", "tool", "assistant"]
    assert repaired[2].tool_results == [result("a")]


def test_p4_result_for_an_earlier_turns_call_is_an_orphan():
    """P4: a result must answer the assistant message right before it."""
    history = [
        Message.user("hi"),
        Message("assistant", [call("a")]),
        Message("tool", [result("a")]),
        Message.assistant("ok"),
        Message("tool", [result("a", "again")]),  # answers nothing pending
        Message.user("next"),
    ]
    repaired = repair_messages(history)
    assert roles(repaired) == ["user", "assistant", "tool", "assistant", "user"]
    assert [r.content for m in repaired for r in m.tool_results] == ["ok"]


def test_p4_duplicate_results_keep_the_first():
    """P4: two results for one call: the second is dropped."""
    history = [
        Message.user("hi"),
        Message("assistant", [call("a")]),
        Message("tool", [result("a", "first"), result("a", "second")]),
    ]
    assert repair_messages(history)[2].tool_results == [result("a", "first")]


def test_p4_unanswered_calls_get_a_synthesized_error_result():
    """P4: calls without results get an error result, in call order, before going on."""
    history = [
        Message.user("hi"),
        Message("assistant", [call("a"), call("b"), call("c")]),
        Message("tool", [result("b")]),
        Message.user("hello?"),
        Message("assistant", [call("d", "web_fetch")]),  # last message, unanswered
    ]
    repaired = repair_messages(history)
    assert roles(repaired) == ["user", "assistant", "tool", "user", "assistant", "tool"]
    first = repaired[2].tool_results
    assert [r.tool_call_id for r in first] == ["b", "a", "c"]
    synthetic = first[1]
    assert synthetic.is_error
    assert synthetic.error_type == SYNTHETIC_RESULT_ERROR_TYPE
    assert synthetic.name == "bash"
    assert "interrupted" in synthetic.content
    last = repaired[5].tool_results
    assert [(r.tool_call_id, r.name, r.is_error) for r in last] == [("d", "web_fetch", True)]


def test_p4_missing_tool_message_is_inserted_between_assistant_and_user():
    """P4: assistant(call) then user -> a tool message is synthesised between them."""
    history = [Message.user("hi"), Message("assistant", [call("a")]), Message.user("well?")]
    repaired = repair_messages(history)
    assert roles(repaired) == ["user", "assistant", "tool", "user"]


def test_p4_consecutive_same_role_messages_are_merged():
    """P4: roles alternate: neighbours with the same role become one message."""
    history = [
        Message.user("one"),
        Message.user("two"),
        Message.assistant("three"),
        Message("assistant", [call("a")]),
        Message("tool", [result("a")]),
        Message.user("four"),
    ]
    repaired = repair_messages(history)
    assert roles(repaired) == ["user", "assistant", "tool", "user"]
    assert repaired[0].parts == [TextPart("one"), TextPart("two")]
    assert repaired[1].parts == [TextPart("three"), call("a")]


def test_p4_dropping_an_orphan_merges_its_neighbours():
    """P4: user, orphan tool, user -> one user message."""
    history = [Message.user("a"), Message("tool", [result("x")]), Message.user("b")]
    repaired = repair_messages(history)
    assert repaired == [Message("user", [TextPart("a"), TextPart("b")])]


def test_p4_empty_messages_and_blank_text_are_dropped():
    """P4: messages with nothing to send (no parts, blank text, only a finish) go."""
    history = [
        Message.user("hi"),
        Message("assistant", []),
        Message("assistant", [TextPart("   \n")]),
        Message("assistant", [FinishPart("end_turn")]),
        Message("assistant", [TextPart(""), TextPart("real")]),
        Message.user(""),
    ]
    repaired = repair_messages(history)
    assert repaired == [Message.user("hi"), Message.assistant("real")]


def test_p4_leading_assistant_gets_a_user_message_first():
    """P4: Anthropic requires the first message to be the user's."""
    history = [Message.assistant("Summary of earlier talk."), Message.user("go on")]
    repaired = repair_messages(history)
    assert roles(repaired) == ["user", "assistant", "user"]
    assert repaired[0].text == LEADING_USER_TEXT


def test_p4_system_messages_stay_ahead_of_the_user_placeholder():
    """P4: system messages may lead; the first non-system message is the user's."""
    history = [Message("system", [TextPart("sys")]), Message.assistant("hello")]
    assert roles(repair_messages(history)) == ["system", "user", "assistant"]


def test_p4_reasoning_is_kept():
    """P4: reasoning parts (signed thinking) survive repair untouched."""
    thinking = ReasoningPart("hm", signature="sig")
    history = [Message.user("q"), Message("assistant", [thinking, TextPart("a")])]
    assert repair_messages(history)[1].parts[0] is thinking


def test_p4_input_is_never_mutated():
    """P4: repair_messages is pure."""
    history = [
        Message("tool", [result("ghost")]),
        Message.user("a"),
        Message.user("b"),
        Message("assistant", [call("x")]),
        Message("assistant", []),
    ]
    snapshot = copy.deepcopy(history)
    parts_ids = [id(m.parts) for m in history]
    repair_messages(history)
    assert history == snapshot
    assert [id(m.parts) for m in history] == parts_ids


def test_p4_empty_history():
    """P4: nothing in, nothing out."""
    assert repair_messages([]) == []


def test_p4_the_fast_path_returns_exactly_what_the_full_repair_would():
    """A request that needs no repair skips the rebuilding passes; the result must be
    the same as running them, for valid and invalid histories alike."""
    from agents.engine.types import Message, TextPart, ToolCallPart, ToolResultPart
    from agents.providers import repair

    def full(messages):
        cleaned = repair._merge_same_role(repair._drop_empty(messages))
        paired = repair._merge_same_role(repair._drop_empty(repair._pair_tool_results(cleaned)))
        return repair._ensure_user_first(paired)

    call = ToolCallPart("c1", "lookup", {"q": 1})
    result = ToolResultPart("c1", "lookup", "42")
    cases = [
        [Message.user("hi"), Message.assistant("hello")],
        [
            Message.user("hi"),
            Message("assistant", [TextPart("x"), call]),
            Message("tool", [result]),
            Message.assistant("done"),
        ],
        [Message.assistant("starts with assistant"), Message.user("hi")],
        [Message.user("a"), Message.user("b")],
        [Message.user("hi"), Message("assistant", [call]), Message.user("no result")],
        [Message.user("hi"), Message("tool", [result])],
        [Message.user("hi"), Message.assistant("   ")],
        [Message.user("hi"), Message("assistant", [call])],
    ]
    for messages in cases:
        assert repair.repair_messages(messages) == full(messages)
    assert repair._already_valid(cases[0])
    assert repair._already_valid(cases[1])
    assert not any(repair._already_valid(c) for c in cases[2:])
