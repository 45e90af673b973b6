"""Token estimates used for pruning and compaction (E17, E18)."""

from __future__ import annotations

from agents.engine.tokens import (
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD_TOKENS,
    estimate_text_tokens,
    estimate_tokens,
)
from agents.engine.types import ImagePart, Message, ToolCallPart, ToolResultPart


def test_e18_it_estimates_text_at_about_four_characters_per_token() -> None:
    assert estimate_text_tokens("") == 0
    assert estimate_text_tokens("abcd") == 1
    assert estimate_text_tokens("abcde") == 2
    assert estimate_text_tokens("x" * 4000) == 1000


def test_e18_it_counts_the_system_prompt_and_a_per_message_overhead() -> None:
    messages = [Message.user("x" * 400), Message.assistant("y" * 400)]
    assert estimate_tokens(messages) == 200 + 2 * MESSAGE_OVERHEAD_TOKENS
    assert estimate_tokens(messages, system="z" * 400) == 300 + 2 * MESSAGE_OVERHEAD_TOKENS


def test_e17_it_counts_tool_arguments_and_tool_results() -> None:
    call = Message("assistant", [ToolCallPart("c1", "bash", {"command": "x" * 4000})])
    result = Message("tool", [ToolResultPart("c1", "bash", "r" * 40_000)])
    assert estimate_tokens([call]) > 1000
    assert estimate_tokens([result]) >= 10_000


def test_e18_it_gives_images_a_fixed_cost_and_stored_images_a_placeholder_cost() -> None:
    with_data = Message("user", [ImagePart("image/png", data="A" * 1_000_000)])
    stored = Message("user", [ImagePart("image/png")])
    assert estimate_tokens([with_data]) == IMAGE_TOKENS + MESSAGE_OVERHEAD_TOKENS
    assert estimate_tokens([stored]) < 10


def test_e18_it_accepts_unserialisable_arguments() -> None:
    call = Message("assistant", [ToolCallPart("c1", "x", {"when": object()})])
    assert estimate_tokens([call]) > MESSAGE_OVERHEAD_TOKENS
