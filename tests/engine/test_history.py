"""History pipeline: turn limit, two-pass tool-result pruning, pairing repair (E17)."""

from __future__ import annotations

import copy

from agents.engine.history import (
    CLEARED_RESULT_TEXT,
    MISSING_RESULT_TEXT,
    PruneSettings,
    build_history,
    limit_history_turns,
    prune_tool_results,
    repair_tool_pairing,
)
from agents.engine.types import Message, TextPart, ToolCallPart, ToolResultPart


def call(call_id: str, name: str = "bash", text: str = "") -> Message:
    parts: list = [TextPart(text)] if text else []
    return Message("assistant", [*parts, ToolCallPart(call_id, name, {"command": "x"})])


def result(call_id: str, content: str = "ok", name: str = "bash") -> Message:
    return Message("tool", [ToolResultPart(call_id, name, content)])


def tool_turn(n: int, size: int) -> list[Message]:
    return [
        Message.user(f"question {n}"),
        call(f"c{n}"),
        result(f"c{n}", f"<{n}>" + "r" * size),
        Message.assistant(f"answer {n}"),
    ]


def contents(messages: list[Message]) -> list[str]:
    return [p.content for m in messages for p in m.tool_results]


# ------------------------------------------------------------------ turn limit


def test_e17_it_keeps_the_last_n_user_turns_with_their_tool_messages() -> None:
    history = tool_turn(1, 10) + tool_turn(2, 10) + tool_turn(3, 10)
    limited = limit_history_turns(history, 2)
    assert limited == history[4:]
    assert limited[0].text == "question 2"


def test_e17_no_turn_limit_keeps_everything() -> None:
    history = tool_turn(1, 10) + tool_turn(2, 10)
    assert limit_history_turns(history, None) == history
    assert limit_history_turns(history, 0) == history
    assert limit_history_turns(history, 5) == history


# --------------------------------------------------------------------- pruning


def test_e17_nothing_is_pruned_below_the_soft_trim_ratio() -> None:
    history = tool_turn(1, 5000) + tool_turn(2, 10) + tool_turn(3, 10) + tool_turn(4, 10)
    pruned = prune_tool_results(history, context_window=100_000)
    assert contents(pruned) == contents(history)


def test_e17_soft_trim_keeps_head_and_tail_of_old_large_results() -> None:
    # ~31k tokens of tool output in a 60k window: ratio ~0.5 -> soft trim.
    big = "H" * 1500 + "M" * 10_000 + "T" * 1500
    history = [
        Message.user("start"),
        call("c0"),
        result("c0", big * 9),
        Message.assistant("a0"),
        *tool_turn(1, 10),
        *tool_turn(2, 10),
        *tool_turn(3, 10),
    ]
    settings = PruneSettings(min_prunable_tool_chars=10**9)  # isolate pass 1
    pruned = prune_tool_results(history, context_window=60_000, settings=settings)
    trimmed = pruned[2].tool_results[0].content
    assert trimmed.startswith("H" * 1500)
    assert "T" * 1500 in trimmed
    assert "..." in trimmed
    assert len(trimmed) < 3300


def test_e17_hard_clear_replaces_old_results_when_over_half_the_window() -> None:
    # 20 old results of 6,000 chars: after soft trim they still hold > 50,000 chars and
    # fill > 50 % of a 30k-token window, so the oldest are cleared until under 50 %.
    history = [Message.user("start")]
    for n in range(20):
        history += [call(f"c{n}"), result(f"c{n}", "x" * 6000), Message.assistant(f"a{n}")]
    history += tool_turn(97, 10) + tool_turn(98, 10) + tool_turn(99, 10)
    pruned = prune_tool_results(history, context_window=30_000)
    results = contents(pruned)
    assert results[0] == CLEARED_RESULT_TEXT
    assert results[19] != CLEARED_RESULT_TEXT  # stopped once under the threshold
    assert "..." in results[19]  # but soft-trimmed
    assert results[-1].endswith("r" * 10)  # protected recent result untouched


def test_e17_hard_clear_needs_enough_prunable_tool_characters() -> None:
    history = [
        Message.user("start"),
        call("c0"),
        result("c0", "x" * 5000),
        Message.assistant("a0"),
        *tool_turn(2, 10),
        *tool_turn(3, 10),
        *tool_turn(4, 10),
    ]
    pruned = prune_tool_results(history, context_window=1_000, system="s" * 40_000)
    assert CLEARED_RESULT_TEXT not in contents(pruned)
    assert "..." in pruned[2].tool_results[0].content  # soft-trimmed only


def test_e17_the_protected_zone_is_never_pruned() -> None:
    # First user message and what precedes it, and the last 3 assistant messages.
    bootstrap = [call("b0"), result("b0", "B" * 20_000)]
    recent = [Message.user("q"), call("r1"), result("r1", "R" * 20_000)]
    recent += [Message.assistant("a"), Message.assistant("b")]
    history = [*bootstrap, Message.user("first"), *recent]
    pruned = prune_tool_results(history, context_window=20_000)
    assert contents(pruned) == contents(history)


def test_e17_a_huge_single_result_is_capped_even_when_protected() -> None:
    history = [Message.user("go"), call("c1"), result("c1", "z" * 10_000_000)]
    pruned = prune_tool_results(history, context_window=128_000)
    content = pruned[2].tool_results[0].content
    assert len(content) <= 128_000 * 4 // 2 + 200
    assert "trimmed" in content


def test_e17_pruning_never_mutates_its_input() -> None:
    history = [
        Message.user("start"),
        call("c0"),
        result("c0", "x" * 80000),
        Message.assistant("a0"),
        *tool_turn(2, 10),
        *tool_turn(3, 10),
        *tool_turn(4, 10),
    ]
    snapshot = copy.deepcopy(history)
    pruned = prune_tool_results(history, context_window=10_000)
    assert history == snapshot
    assert pruned is not history
    assert contents(pruned) != contents(history)


# --------------------------------------------------------------------- pairing


def test_e17_it_drops_orphaned_leading_tool_results() -> None:
    history = [result("gone"), Message.assistant("kept"), Message.user("hi")]
    assert repair_tool_pairing(history) == [Message.assistant("kept"), Message.user("hi")]
    strict = repair_tool_pairing(history, drop_leading_non_user=True)
    assert strict == [Message.user("hi")]


def test_e17_it_drops_orphaned_tool_results_in_the_middle() -> None:
    history = [Message.user("q"), Message.assistant("no calls"), result("x"), Message.user("n")]
    repaired = repair_tool_pairing(history)
    assert [m.role for m in repaired] == ["user", "assistant", "user"]


def test_e17_it_drops_results_whose_ids_do_not_match() -> None:
    history = [Message.user("q"), call("c1"), result("c1", "good"), result("zz", "bad")]
    repaired = repair_tool_pairing(history)
    assert contents(repaired) == ["good"]


def test_e17_it_synthesises_missing_results() -> None:
    assistant = Message("assistant", [ToolCallPart("c1", "bash", {}), ToolCallPart("c2", "read_file", {})])
    history = [Message.user("q"), assistant, result("c2", "file"), Message.user("next")]
    repaired = repair_tool_pairing(history)
    assert [m.role for m in repaired] == ["user", "assistant", "tool", "user"]
    results = repaired[2].tool_results
    assert [r.tool_call_id for r in results] == ["c1", "c2"]
    assert results[0].content == MISSING_RESULT_TEXT
    assert results[0].name == "bash"
    assert results[1].content == "file"


def test_e17_it_gathers_split_result_messages_in_call_order() -> None:
    assistant = Message("assistant", [ToolCallPart("a", "x", {}), ToolCallPart("b", "y", {})])
    history = [Message.user("q"), assistant, result("b", "B", "y"), result("a", "A", "x")]
    repaired = repair_tool_pairing(history)
    assert len(repaired) == 3
    assert contents(repaired) == ["A", "B"]


def test_e17_it_merges_consecutive_same_role_messages() -> None:
    history = [Message.user("one"), Message.user("two"), Message.assistant("a"),
               Message.assistant("b")]  # fmt: skip
    repaired = repair_tool_pairing(history)
    assert [m.role for m in repaired] == ["user", "assistant"]
    assert repaired[0].text == "one\n\ntwo"
    assert repaired[1].text == "a\n\nb"


def test_e17_repair_never_mutates_its_input() -> None:
    history = [Message.user("one"), Message.user("two"), call("c1"), Message.user("x")]
    snapshot = copy.deepcopy(history)
    repair_tool_pairing(history)
    assert history == snapshot


# -------------------------------------------------------------------- pipeline


def test_e17_build_history_runs_limit_then_prune_then_repair() -> None:
    history = tool_turn(1, 10) + tool_turn(2, 10)
    history += [Message.user("question 3"), call("c3"), result("c3", "z" * 10_000_000)]
    built = build_history(history, turn_limit=2, context_window=100_000)
    assert built[0].text == "question 2"
    assert sum(len(c) for c in contents(built)) < 250_000
    # The orphaned tail call of an interrupted run is answered with a placeholder.
    crashed = history[:-1]
    rebuilt = build_history(crashed, turn_limit=None, context_window=100_000)
    assert rebuilt[-1].tool_results[0].content == MISSING_RESULT_TEXT


def test_e17_build_history_is_linear_on_ten_thousand_messages() -> None:
    history = [m for n in range(2500) for m in tool_turn(n, 2000)]
    built = build_history(history, turn_limit=None, context_window=200_000)
    assert len(built) == len(history)
    assert CLEARED_RESULT_TEXT in contents(built)
