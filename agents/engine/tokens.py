"""Cheap token estimates for budgeting context (E17, E18).

Runs on every request, so it is a single linear pass with no tokenizer and no regex:
roughly four characters per token, plus a small per-message overhead (IronClaw's
context monitor adds 4 per message) and a fixed cost per image. The figures only
need to be good enough to decide when to prune or compact; real usage comes back
from the provider.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from agents.engine.types import (
    IMAGE_PLACEHOLDER,
    ImagePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

CHARS_PER_TOKEN = 4
# Role markers, separators and the like that every provider adds around a message.
MESSAGE_OVERHEAD_TOKENS = 4
# An attached image costs about this many tokens on Anthropic and OpenAI (~1,000 x
# 1,000 pixels); stored images (data stripped) are sent as a short placeholder.
IMAGE_TOKENS = 1_600
# Used when a model profile does not say how large its window is (GoClaw's default).
DEFAULT_CONTEXT_WINDOW = 200_000


def estimate_text_tokens(text: str) -> int:
    """Estimate the tokens in ``text`` (about four characters per token, rounded up)."""
    if not text:
        return 0
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def arguments_chars(arguments: dict[str, Any]) -> int:
    """Length of tool-call arguments as they go over the wire (compact JSON)."""
    if not arguments:
        return 2
    try:
        return len(json.dumps(arguments, ensure_ascii=False, separators=(",", ":"), default=str))
    except (TypeError, ValueError):
        # Circular or otherwise unserialisable: fall back to the repr length.
        return len(repr(arguments))


def message_chars(message: Message) -> tuple[int, int]:
    """Return ``(characters, fixed_tokens)`` for one message.

    Characters are divided by :data:`CHARS_PER_TOKEN` once for the whole conversation
    so rounding does not accumulate per part; images contribute fixed tokens.
    """
    chars = 0
    fixed = MESSAGE_OVERHEAD_TOKENS
    for part in message.parts:
        if isinstance(part, TextPart | ReasoningPart):
            chars += len(part.text)
        elif isinstance(part, ToolResultPart):
            chars += len(part.content) + len(part.name) + len(part.tool_call_id)
        elif isinstance(part, ToolCallPart):
            chars += len(part.name) + len(part.id) + arguments_chars(part.arguments)
        elif isinstance(part, ImagePart):
            if part.data:
                fixed += IMAGE_TOKENS
            else:
                chars += len(IMAGE_PLACEHOLDER)
        # FinishPart is bookkeeping and never sent.
    return chars, fixed


def estimate_tokens(messages: Iterable[Message], system: str = "") -> int:
    """Estimate the prompt tokens of ``messages`` plus the ``system`` prompt.

    Text, reasoning, tool-call names and JSON arguments and tool-result contents
    count at about four characters per token; each message adds a small overhead and
    each image with data a fixed :data:`IMAGE_TOKENS`. Linear in the input size.
    """
    chars = len(system)
    fixed = 0
    for message in messages:
        c, f = message_chars(message)
        chars += c
        fixed += f
    return fixed + (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN
