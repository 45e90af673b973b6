"""History pipeline: what of a session's stored messages goes to the model (E17).

GoClaw's three stages, in order (:func:`build_history`):

1. :func:`limit_history_turns` -- keep the last N user turns with everything that
   belongs to them;
2. :func:`prune_tool_results` -- two-pass pruning of large tool results (soft trim
   at 30 % of the context window, hard clear at 50 %), never touching the protected
   zone (system messages, the last 3 assistant messages and what follows them, the
   first user message and anything before it);
3. :func:`repair_tool_pairing` -- GoClaw ``sanitizeHistory`` and MicroClaw's
   ``sanitize_messages``: orphaned and mismatched tool results dropped, missing ones
   synthesised, same-role neighbours merged so providers accept the sequence.

Canonical form: the results of an assistant message's tool calls are one message of
role ``tool`` holding :class:`ToolResultPart`\\s, right after it. Every function here
is linear in the messages it is given and never mutates them: changed messages are
new objects, unchanged ones are shared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from agents.engine.tokens import (
    CHARS_PER_TOKEN,
    DEFAULT_CONTEXT_WINDOW,
    estimate_tokens,
)
from agents.engine.types import Message, Part, TextPart, ToolResultPart

MISSING_RESULT_TEXT = "[Tool result missing -- session was compacted]"
CLEARED_RESULT_TEXT = "[Old tool result content cleared]"


@dataclass(frozen=True)
class PruneSettings:
    """Context-pruning knobs; defaults are GoClaw's.

    ``max_result_share`` is the hard cap for a single tool result, as a share of the
    context window: above it a result is trimmed even inside the protected zone, so
    a 10 MB tool output is never sent whole.
    """

    keep_last_assistants: int = 3
    soft_trim_ratio: float = 0.3
    hard_clear_ratio: float = 0.5
    soft_trim_min_chars: int = 4000
    soft_trim_keep_head: int = 1500
    soft_trim_keep_tail: int = 1500
    min_prunable_tool_chars: int = 50_000
    max_result_share: float = 0.5


DEFAULT_PRUNE_SETTINGS = PruneSettings()


# ---------------------------------------------------------------- stage 1: turns


def limit_history_turns(messages: Sequence[Message], turn_limit: int | None) -> list[Message]:
    """Keep the last ``turn_limit`` user turns and every message that follows them.

    A turn starts at a user message. ``None`` or a value below 1 means no limit.
    """
    if not turn_limit or turn_limit < 1:
        return list(messages)
    seen = 0
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            seen += 1
            if seen == turn_limit:
                return list(messages[index:])
    return list(messages)


# -------------------------------------------------------------- stage 2: pruning


def trim_middle(content: str, head: int, tail: int) -> str:
    """Keep the first ``head`` and last ``tail`` characters with a marker between."""
    if len(content) <= head + tail:
        return content
    omitted = len(content) - head - tail
    return (
        f"{content[:head]}\n...\n{content[len(content) - tail :]}\n"
        f"[Tool result trimmed: kept the first {head:,} and last {tail:,} of "
        f"{len(content):,} characters; {omitted:,} omitted]"
    )


def _with_results(message: Message, new_results: dict[int, str]) -> Message:
    """Copy of ``message`` with the contents of some parts (by index) replaced."""
    parts: list[Part] = list(message.parts)
    for index, content in new_results.items():
        part = parts[index]
        assert isinstance(part, ToolResultPart)
        parts[index] = replace(part, content=content)
    return Message(message.role, parts)


def _protected_bounds(messages: Sequence[Message], keep_last_assistants: int) -> tuple[int, int]:
    """Return ``(first, cutoff)``: only indices ``first < i < cutoff`` may be pruned.

    ``first`` is the first user message (it and what precedes it, e.g. bootstrap
    reads, are protected); ``cutoff`` is the ``keep_last_assistants``-th assistant
    message from the end (it and everything after are protected). With fewer
    assistant messages than that, nothing is prunable.
    """
    first = next((i for i, m in enumerate(messages) if m.role == "user"), len(messages))
    cutoff = 0
    if keep_last_assistants <= 0:
        cutoff = len(messages)
    else:
        seen = 0
        for index in range(len(messages) - 1, -1, -1):
            if messages[index].role == "assistant":
                seen += 1
                if seen == keep_last_assistants:
                    cutoff = index
                    break
    return first, cutoff


def prune_tool_results(
    messages: Sequence[Message],
    *,
    context_window: int,
    settings: PruneSettings = DEFAULT_PRUNE_SETTINGS,
    system: str = "",
) -> list[Message]:
    """Shrink large tool results when the context fills up (GoClaw two-pass pruning).

    0. Any single result larger than ``max_result_share`` of the window is trimmed
       head + tail wherever it is (a result that alone fills the window is useless).
    1. Soft trim, when the estimate reaches ``soft_trim_ratio`` of the window: every
       prunable result longer than ``soft_trim_min_chars`` keeps its first
       ``soft_trim_keep_head`` and last ``soft_trim_keep_tail`` characters.
    2. Hard clear, when it still reaches ``hard_clear_ratio`` and the prunable results
       together hold at least ``min_prunable_tool_chars`` (so a few small results are
       not lost for little gain): prunable results, oldest first, are replaced by
       ``[Old tool result content cleared]`` until the ratio drops below the threshold.

    Protected (never soft-trimmed or cleared): system messages, the last
    ``keep_last_assistants`` assistant messages and everything after the earliest of
    them, the first user message and everything before it. Returns a new list;
    messages it changes are copies.
    """
    window = context_window if context_window > 0 else DEFAULT_CONTEXT_WINDOW
    out = list(messages)
    tokens = estimate_tokens(out, system)

    # Pass 0: hard cap on a single result, protected zone included.
    cap_chars = max(
        settings.soft_trim_keep_head + settings.soft_trim_keep_tail,
        int(window * CHARS_PER_TOKEN * settings.max_result_share),
    )
    for index, message in enumerate(out):
        oversized: dict[int, str] = {}
        for p_index, part in enumerate(message.parts):
            if isinstance(part, ToolResultPart) and len(part.content) > cap_chars:
                head = cap_chars // 2
                trimmed = trim_middle(part.content, head, cap_chars - head)
                tokens -= (len(part.content) - len(trimmed)) // CHARS_PER_TOKEN
                oversized[p_index] = trimmed
        if oversized:
            out[index] = _with_results(message, oversized)

    if tokens < settings.soft_trim_ratio * window:
        return out

    first, cutoff = _protected_bounds(out, settings.keep_last_assistants)
    prunable = [i for i in range(first + 1, cutoff) if out[i].role != "system" and out[i].tool_results]
    if not prunable:
        return out

    # Pass 1: soft trim.
    head, tail = settings.soft_trim_keep_head, settings.soft_trim_keep_tail
    min_chars = max(settings.soft_trim_min_chars, head + tail)
    for index in prunable:
        message = out[index]
        trimmed_parts: dict[int, str] = {}
        for p_index, part in enumerate(message.parts):
            if isinstance(part, ToolResultPart) and len(part.content) > min_chars:
                trimmed = trim_middle(part.content, head, tail)
                tokens -= (len(part.content) - len(trimmed)) // CHARS_PER_TOKEN
                trimmed_parts[p_index] = trimmed
        if trimmed_parts:
            out[index] = _with_results(message, trimmed_parts)

    if tokens < settings.hard_clear_ratio * window:
        return out
    prunable_chars = sum(
        len(p.content)
        for i in prunable
        for p in out[i].parts
        if isinstance(p, ToolResultPart) and p.content != CLEARED_RESULT_TEXT
    )
    if prunable_chars < settings.min_prunable_tool_chars:
        return out

    # Pass 2: hard clear, oldest first, until under the threshold.
    for index in prunable:
        message = out[index]
        cleared: dict[int, str] = {}
        for p_index, part in enumerate(message.parts):
            if isinstance(part, ToolResultPart) and part.content != CLEARED_RESULT_TEXT:
                tokens -= (len(part.content) - len(CLEARED_RESULT_TEXT)) // CHARS_PER_TOKEN
                cleared[p_index] = CLEARED_RESULT_TEXT
        if cleared:
            out[index] = _with_results(message, cleared)
        if tokens < settings.hard_clear_ratio * window:
            break
    return out


# -------------------------------------------------------------- stage 3: pairing


def _missing_result(call_id: str, name: str) -> ToolResultPart:
    return ToolResultPart(tool_call_id=call_id, name=name, content=MISSING_RESULT_TEXT, is_error=True)


def _merge(previous: Message, message: Message) -> Message:
    """One message with both messages' parts; adjacent texts joined by a blank line."""
    parts: list[Part] = list(previous.parts)
    incoming = list(message.parts)
    if parts and incoming and isinstance(parts[-1], TextPart) and isinstance(incoming[0], TextPart):
        parts[-1] = TextPart(f"{parts[-1].text}\n\n{incoming[0].text}")
        incoming = incoming[1:]
    return Message(previous.role, parts + incoming)


def repair_tool_pairing(
    messages: Sequence[Message],
    *,
    merge_consecutive: bool = True,
    drop_leading_non_user: bool = False,
) -> list[Message]:
    """Make tool calls and results pair up again after truncation or compaction.

    - tool results with no assistant tool call right before them (orphans, e.g. at the
      head of a cut history) are dropped;
    - results whose ids match none of the preceding calls, and duplicates, are dropped;
    - the results of one assistant message are gathered into one ``tool`` message, in
      call order, and a call without a result gets ``[Tool result missing -- session
      was compacted]``;
    - with ``drop_leading_non_user`` the history starts at its first user message
      (MicroClaw's invariant). Off by default: a history kept after compaction may
      open with the assistant, and the provider layer puts a stand-in user message
      first (``agents.providers.repair``) rather than losing that content;
    - with ``merge_consecutive`` neighbouring user (or plain assistant) messages are
      merged so roles alternate.
    """
    out: list[Message] = []
    start = 0
    if drop_leading_non_user:
        start = next((i for i, m in enumerate(messages) if m.role == "user"), len(messages))
    index = start
    total = len(messages)
    while index < total:
        message = messages[index]
        index += 1
        if message.role == "tool":
            continue  # orphan: its assistant call is not right before it
        calls = message.tool_calls if message.role == "assistant" else []
        if not calls:
            if (
                merge_consecutive
                and out
                and out[-1].role == message.role
                and message.role in ("user", "assistant")
                and not out[-1].tool_calls
            ):
                out[-1] = _merge(out[-1], message)
            else:
                out.append(message)
            continue

        out.append(message)
        expected = {call.id: call for call in calls}
        found: dict[str, ToolResultPart] = {}
        while index < total and messages[index].role == "tool":
            for part in messages[index].parts:
                if (
                    isinstance(part, ToolResultPart)
                    and part.tool_call_id in expected
                    and part.tool_call_id not in found
                ):
                    found[part.tool_call_id] = part
            index += 1
        results: list[Part] = [found.get(call.id) or _missing_result(call.id, call.name) for call in calls]
        out.append(Message("tool", results))
    return out


# ---------------------------------------------------------------------- pipeline


def build_history(
    messages: Sequence[Message],
    *,
    turn_limit: int | None,
    context_window: int,
    settings: PruneSettings = DEFAULT_PRUNE_SETTINGS,
    system: str = "",
) -> list[Message]:
    """Run the three stages in order: limit turns, prune tool results, repair pairing."""
    limited = limit_history_turns(messages, turn_limit)
    pruned = prune_tool_results(limited, context_window=context_window, settings=settings, system=system)
    return repair_tool_pairing(pruned)
