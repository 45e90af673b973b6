"""Compaction (E18) and the memory flush before it (E19)."""

from __future__ import annotations

import asyncio

import pytest

from agents.engine.compaction import (
    MEMORY_FLUSH_PROMPT,
    SUMMARY_PROMPT,
    CompactionSettings,
    choose_strategy,
    compact_history,
    format_transcript,
    memory_flush_messages,
    needs_compaction,
    needs_memory_flush,
    safe_cut_index,
    summary_messages,
    summary_request_text,
)
from agents.engine.types import Message, ToolCallPart, ToolResultPart


def chat(turns: int) -> list[Message]:
    out: list[Message] = []
    for n in range(turns):
        out += [Message.user(f"question {n}"), Message.assistant(f"answer {n}")]
    return out


def with_tools() -> list[Message]:
    return [
        Message.user("q0"),
        Message.assistant("a0"),
        Message.user("q1"),
        Message("assistant", [ToolCallPart("c1", "bash", {}), ToolCallPart("c2", "bash", {})]),
        Message("tool", [ToolResultPart("c1", "bash", "r1"), ToolResultPart("c2", "bash", "r2")]),
        Message.assistant("done"),
    ]


class RecordingSummarizer:
    def __init__(self, reply: str = "SUMMARY") -> None:
        self.reply = reply
        self.calls: list[tuple[list[Message], str | None]] = []

    async def __call__(self, messages: list[Message], previous: str | None) -> str:
        self.calls.append((messages, previous))
        return self.reply


# ------------------------------------------------------------------- triggers


def test_e18_it_triggers_above_fifty_messages() -> None:
    assert not needs_compaction(chat(25), context_window=1_000_000)  # 50 messages
    assert needs_compaction([*chat(25), Message.user("one more")], context_window=1_000_000)


def test_e18_it_triggers_above_75_percent_of_the_window() -> None:
    messages = [Message.user("x" * 4 * 700)]
    assert not needs_compaction(messages, context_window=1000)
    assert needs_compaction([Message.user("x" * 4 * 800)], context_window=1000)
    assert needs_compaction(messages, context_window=1000, system="s" * 400)


def test_e18_settings_change_the_triggers() -> None:
    settings = CompactionSettings(message_threshold=3, trigger_ratio=0.1)
    assert needs_compaction(chat(2), context_window=1_000_000, settings=settings)
    assert needs_compaction([Message.user("x" * 500)], context_window=1000, settings=settings)


@pytest.mark.parametrize(
    ("ratio", "strategy"),
    [(0.5, "summarize"), (0.80, "archive"), (0.84, "archive"), (0.85, "summarize"),
     (0.94, "summarize"), (0.95, "truncate"), (1.3, "truncate")],
)  # fmt: skip
def test_e18_strategy_follows_context_pressure(ratio: float, strategy: str) -> None:
    assert choose_strategy(ratio) == strategy


# ----------------------------------------------------------------- summarize


async def test_e18_summarize_keeps_the_last_four_messages_and_returns_the_summary() -> None:
    messages = chat(10)
    summarizer = RecordingSummarizer()
    result = await compact_history(
        messages, summarize=summarizer, previous_summary="OLD", context_window=100_000,
        strategy="summarize",
    )  # fmt: skip
    assert result.strategy == "summarize"
    assert result.error is None
    assert result.summary == "SUMMARY"
    assert result.kept == messages[-4:]
    assert result.removed == messages[:-4]
    assert summarizer.calls == [(messages[:-4], "OLD")]
    assert result.compacted


async def test_e18_a_failed_summary_never_loses_history() -> None:
    async def broken(messages: list[Message], previous: str | None) -> str:
        raise TimeoutError("provider took too long")

    messages = chat(10)
    result = await compact_history(
        messages, summarize=broken, previous_summary="OLD", context_window=100_000,
        strategy="summarize",
    )  # fmt: skip
    assert result.kept == messages
    assert result.removed == []
    assert result.summary == "OLD"
    assert result.error is not None
    assert "TimeoutError" in result.error
    assert not result.compacted


async def test_e18_an_empty_summary_counts_as_a_failure() -> None:
    messages = chat(10)
    result = await compact_history(
        messages, summarize=RecordingSummarizer("   "), previous_summary=None,
        context_window=100_000, strategy="summarize",
    )  # fmt: skip
    assert result.kept == messages
    assert result.error is not None


async def test_e18_cancellation_is_not_swallowed() -> None:
    async def cancelled(messages: list[Message], previous: str | None) -> str:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await compact_history(
            chat(10), summarize=cancelled, previous_summary=None, context_window=100_000,
            strategy="summarize",
        )  # fmt: skip


async def test_e18_the_cut_never_splits_tool_calls_from_their_results() -> None:
    messages = with_tools()
    settings = CompactionSettings(keep_recent=2)  # naive cut lands on the tool message
    result = await compact_history(
        messages, summarize=RecordingSummarizer(), previous_summary=None,
        settings=settings, context_window=100_000, strategy="summarize",
    )  # fmt: skip
    assert result.kept == messages[3:]
    assert result.kept[0].tool_calls
    assert safe_cut_index(messages, 4) == 3
    assert safe_cut_index(messages, 5) == 5


async def test_e18_nothing_to_compact_when_history_is_short() -> None:
    summarizer = RecordingSummarizer()
    result = await compact_history(
        chat(2), summarize=summarizer, previous_summary="OLD", context_window=100_000,
        strategy="summarize",
    )  # fmt: skip
    assert result.removed == []
    assert result.summary == "OLD"
    assert summarizer.calls == []


# ------------------------------------------------------ truncate and archive


async def test_e18_truncate_drops_old_messages_without_calling_the_llm() -> None:
    summarizer = RecordingSummarizer()
    messages = chat(10)
    result = await compact_history(
        messages, summarize=summarizer, previous_summary="OLD", context_window=100_000,
        strategy="truncate",
    )  # fmt: skip
    assert summarizer.calls == []
    assert result.kept == messages[-4:]
    assert result.summary == "OLD"


async def test_e18_archive_keeps_ten_turns_and_hands_back_the_rest() -> None:
    summarizer = RecordingSummarizer()
    messages = chat(15)
    result = await compact_history(
        messages, summarize=summarizer, previous_summary=None, context_window=100_000,
        strategy="archive",
    )  # fmt: skip
    assert summarizer.calls == []
    assert result.kept == messages[-20:]
    assert result.removed == messages[:10]


async def test_e18_the_strategy_is_chosen_by_pressure_when_not_given() -> None:
    messages = [Message.user("x" * 4000), Message.assistant("y"), *chat(3)]
    result = await compact_history(
        messages, summarize=RecordingSummarizer(), previous_summary=None, context_window=1000
    )
    assert result.strategy == "truncate"
    assert result.tokens_after < result.tokens_before


async def test_e18_it_rejects_an_unknown_strategy() -> None:
    with pytest.raises(ValueError, match="strategy"):
        await compact_history(
            chat(3), summarize=RecordingSummarizer(), previous_summary=None,
            context_window=1000, strategy="shred",
        )  # fmt: skip


# ------------------------------------------------------- summary injection


def test_e18_summary_is_injected_as_a_user_and_an_assistant_message() -> None:
    first, second = summary_messages("They chose PostgreSQL.")
    assert first.role == "user"
    assert first.text == "[Previous conversation summary]\nThey chose PostgreSQL."
    assert second.role == "assistant"
    assert second.text.startswith("I understand the context")


def test_e18_summary_prompt_and_transcript() -> None:
    assert "preserving key facts" in SUMMARY_PROMPT
    text = summary_request_text(with_tools(), "earlier summary")
    assert text.startswith(SUMMARY_PROMPT)
    assert "Previous summary:\nearlier summary" in text
    assert "[user]: q1" in text
    assert "(called bash" in text
    assert "(bash result: r1)" in text
    long = format_transcript([Message.user("z" * 50_000)], max_chars=1000)
    assert len(long) < 1100


# -------------------------------------------------------------- memory flush


def test_e19_memory_flush_prompt_is_goclaws() -> None:
    assert MEMORY_FLUSH_PROMPT.startswith("Store durable memories now, if nothing to store reply NO_REPLY.")


def test_e19_memory_flush_triggers_near_the_window_once_per_cycle() -> None:
    window = 100_000
    near = [Message.user("x" * 4 * 77_000)]  # 77k >= 100k - 20k - 4k
    far = [Message.user("x" * 4 * 70_000)]
    assert needs_memory_flush(near, context_window=window)
    assert not needs_memory_flush(far, context_window=window)
    assert not needs_memory_flush(
        near, context_window=window, compaction_count=2, last_flush_compaction_count=2
    )
    assert needs_memory_flush(near, context_window=window, compaction_count=3, last_flush_compaction_count=2)


def test_e19_memory_flush_turn_gets_recent_messages_then_the_prompt() -> None:
    messages = chat(20)
    flush = memory_flush_messages(messages)
    assert flush[:-1] == messages[-10:]
    assert flush[-1].role == "user"
    assert flush[-1].text == MEMORY_FLUSH_PROMPT
    # Never starts on a tool result.
    tool_flush = memory_flush_messages(with_tools(), recent=2)
    assert tool_flush[0].role == "user"
