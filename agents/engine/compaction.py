"""Compaction and memory flush, engine side (E18, E19).

When to compact (GoClaw phase 7): more than ``message_threshold`` messages, or the
token estimate above ``trigger_ratio`` of the context window, or ``/compact``.

How (IronClaw's context monitor picks by pressure, :func:`choose_strategy`):

- ``summarize`` -- an LLM summary of everything but the last ``keep_recent``
  messages replaces them (GoClaw: keep 4, temperature 0.3, 1,024 tokens);
- ``archive`` -- no LLM call: old messages are handed back for the caller to write
  to the archive (IronClaw's MoveToWorkspace), the last 10 user turns stay;
- ``truncate`` -- no LLM call: old messages are dropped (critical pressure).

The summary is injected at the head of later requests as two messages
(:func:`summary_messages`). A failed summary never loses history: the result keeps
every message and carries the error. Cut points never separate an assistant's tool
calls from their results.

Before compacting, the loop runs a memory flush (GoClaw section 8): a short turn in
``minimal`` prompt mode, with :data:`MEMORY_FLUSH_PROMPT` and the 10 most recent
messages, so the agent can save durable memories first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from agents.engine.tokens import DEFAULT_CONTEXT_WINDOW, estimate_tokens
from agents.engine.types import (
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

STRATEGY_SUMMARIZE = "summarize"
STRATEGY_ARCHIVE = "archive"
STRATEGY_TRUNCATE = "truncate"
STRATEGIES = (STRATEGY_SUMMARIZE, STRATEGY_ARCHIVE, STRATEGY_TRUNCATE)

# IronClaw's pressure bands (share of the context window).
ARCHIVE_RATIO = 0.80
SUMMARIZE_RATIO = 0.85
TRUNCATE_RATIO = 0.95
# IronClaw's MoveToWorkspace keeps this many recent turns.
ARCHIVE_KEEP_TURNS = 10

SUMMARY_TIMEOUT_SECONDS = 120
SUMMARY_SYSTEM_PROMPT = "You are a helpful summarizer."
# MicroClaw caps the transcript handed to the summarizer.
SUMMARY_INPUT_MAX_CHARS = 20_000
SUMMARY_HEADER = "[Previous conversation summary]"
SUMMARY_ACKNOWLEDGEMENT = (
    "I understand the context of our previous conversation and will continue from there."
)

SUMMARY_PROMPT = """\
Summarize the following conversation concisely, preserving key facts, decisions, tool \
results, and context needed to continue the conversation. Be brief but thorough.

Keep: the user's goals and preferences, what has been done and what is still open, \
names, numbers, file paths, identifiers and decisions that later turns may need, and \
any errors worth remembering. Leave out greetings and small talk. If a previous summary \
is given, merge it with the new messages into one updated summary; do not summarize \
the summary. Write plain prose or short bullet points, without a preamble."""

# GoClaw's default flush prompt, with the tools it may use named.
MEMORY_FLUSH_PROMPT = """\
Store durable memories now, if nothing to store reply NO_REPLY.

The conversation so far is about to be compacted and older messages will no longer be \
visible to you. Save anything worth keeping for future conversations (the user's \
preferences, facts about them and their projects, decisions, commitments, open tasks) \
with your memory or file tools, for example by appending to MEMORY.md. Do not save \
secrets or passwords. Do not reply to the user."""

MEMORY_FLUSH_RECENT_MESSAGES = 10
MEMORY_FLUSH_MAX_ITERATIONS = 5
MEMORY_FLUSH_TIMEOUT_SECONDS = 90
# GoClaw flushes when the estimate reaches the window minus these reserves.
MEMORY_FLUSH_RESERVE_TOKENS = 20_000
MEMORY_FLUSH_SOFT_THRESHOLD_TOKENS = 4_000

Summarizer = Callable[[list[Message], str | None], Awaitable[str]]


@dataclass(frozen=True)
class CompactionSettings:
    """When and how to compact; defaults are GoClaw's."""

    message_threshold: int = 50
    trigger_ratio: float = 0.75
    keep_recent: int = 4
    summary_max_tokens: int = 1024
    summary_temperature: float = 0.3


DEFAULT_COMPACTION_SETTINGS = CompactionSettings()


@dataclass
class CompactionResult:
    """Outcome of :func:`compact_history`.

    ``summary`` is the summary to store (the new one, or the previous one when the
    strategy makes none); ``kept`` the messages that stay in history, ``removed``
    those taken out (the caller archives or deletes them). On failure ``error`` is
    set, ``kept`` holds every message and ``removed`` is empty.
    """

    summary: str | None
    kept: list[Message]
    removed: list[Message]
    strategy: str
    error: str | None = None
    tokens_before: int = 0
    tokens_after: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def compacted(self) -> bool:
        return self.error is None and bool(self.removed)


def context_ratio(messages: Sequence[Message], *, context_window: int, system: str = "") -> float:
    """Estimated share of the context window that ``messages`` + ``system`` fill."""
    window = context_window if context_window > 0 else DEFAULT_CONTEXT_WINDOW
    return estimate_tokens(messages, system) / window


def needs_compaction(
    messages: Sequence[Message],
    *,
    context_window: int,
    settings: CompactionSettings = DEFAULT_COMPACTION_SETTINGS,
    system: str = "",
) -> bool:
    """True when history has more than ``message_threshold`` messages or fills more
    than ``trigger_ratio`` of the context window (GoClaw: > 50 or > 75 %)."""
    if len(messages) > settings.message_threshold:
        return True
    return context_ratio(messages, context_window=context_window, system=system) > (settings.trigger_ratio)


def choose_strategy(ratio: float) -> str:
    """Pick a strategy from context pressure (IronClaw's ``suggest_compaction``).

    >= 95 %: ``truncate`` (critical; no time for an LLM call); 85-95 %: ``summarize``;
    80-85 %: ``archive``; below 80 % (compaction asked for by message count or by
    ``/compact``): ``summarize``, GoClaw's default.
    """
    if ratio >= TRUNCATE_RATIO:
        return STRATEGY_TRUNCATE
    if ratio >= SUMMARIZE_RATIO:
        return STRATEGY_SUMMARIZE
    if ratio >= ARCHIVE_RATIO:
        return STRATEGY_ARCHIVE
    return STRATEGY_SUMMARIZE


def safe_cut_index(messages: Sequence[Message], index: int) -> int:
    """Move a cut (``kept = messages[index:]``) back so no tool result is separated
    from the assistant message holding its call."""
    index = max(0, min(index, len(messages)))
    while 0 < index < len(messages) and messages[index].role == "tool":
        index -= 1
    return index


def _cut_keeping_messages(messages: Sequence[Message], keep: int) -> int:
    return safe_cut_index(messages, len(messages) - max(keep, 0))


def _cut_keeping_turns(messages: Sequence[Message], turns: int) -> int:
    seen = 0
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            seen += 1
            if seen == turns:
                return index
    return 0


def summary_messages(summary: str) -> list[Message]:
    """The two messages injected at the head of later requests (GoClaw)."""
    return [
        Message.user(f"{SUMMARY_HEADER}\n{summary}"),
        Message.assistant(SUMMARY_ACKNOWLEDGEMENT),
    ]


def format_transcript(messages: Sequence[Message], *, max_chars: int = SUMMARY_INPUT_MAX_CHARS) -> str:
    """Render messages as ``[role]: text`` blocks for a summarizer (MicroClaw).

    Tool calls and results appear in short form; the whole is capped at
    ``max_chars``, keeping the most recent part when it must cut.
    """
    blocks: list[str] = []
    for message in messages:
        lines: list[str] = []
        for part in message.parts:
            if isinstance(part, TextPart) and part.text.strip():
                lines.append(part.text.strip())
            elif isinstance(part, ToolCallPart):
                lines.append(f"(called {part.name} with {part.arguments})"[:500])
            elif isinstance(part, ToolResultPart):
                status = "error" if part.is_error else "result"
                lines.append(f"({part.name} {status}: {part.content.strip()})"[:1000])
            elif isinstance(part, ReasoningPart):
                continue
        if lines:
            blocks.append(f"[{message.role}]: " + "\n".join(lines))
    text = "\n\n".join(blocks)
    if len(text) > max_chars:
        text = "[... earlier messages omitted ...]\n" + text[len(text) - max_chars :]
    return text


def summary_request_text(
    messages: Sequence[Message],
    previous_summary: str | None,
    *,
    max_chars: int = SUMMARY_INPUT_MAX_CHARS,
) -> str:
    """The user message for a summarizer call: prompt, previous summary, transcript."""
    parts = [SUMMARY_PROMPT]
    if previous_summary:
        parts.append(f"Previous summary:\n{previous_summary}")
    parts.append(f"Conversation:\n{format_transcript(messages, max_chars=max_chars)}")
    return "\n\n".join(parts)


async def compact_history(
    messages: Sequence[Message],
    *,
    summarize: Summarizer,
    previous_summary: str | None,
    settings: CompactionSettings = DEFAULT_COMPACTION_SETTINGS,
    strategy: str | None = None,
    context_window: int,
    system: str = "",
) -> CompactionResult:
    """Compact ``messages`` with ``strategy`` (chosen by pressure when ``None``).

    ``summarize(old_messages, previous_summary)`` is called only for ``summarize``; it
    should return the merged summary text (see :data:`SUMMARY_PROMPT`,
    :func:`summary_request_text`, ``summary_max_tokens``/``summary_temperature``).
    If it raises or returns nothing, the result keeps every message, removes none,
    keeps ``previous_summary`` and sets ``error``. Cancellation propagates.
    """
    all_messages = list(messages)
    tokens_before = estimate_tokens(all_messages, system)
    window = context_window if context_window > 0 else DEFAULT_CONTEXT_WINDOW
    if strategy is None:
        strategy = choose_strategy(tokens_before / window)
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown compaction strategy {strategy!r}; expected {STRATEGIES}")

    notes: list[str] = []
    cut = _cut_keeping_messages(all_messages, settings.keep_recent)
    if strategy == STRATEGY_ARCHIVE:
        turns_cut = _cut_keeping_turns(all_messages, ARCHIVE_KEEP_TURNS)
        if turns_cut > 0:
            cut = turns_cut
        else:
            # Fewer than 10 turns (long tool loops): keeping them all would free
            # nothing, so archive all but the recent messages instead.
            notes.append(f"fewer than {ARCHIVE_KEEP_TURNS} turns; kept {settings.keep_recent}")
    removed, kept = all_messages[:cut], all_messages[cut:]

    def result(summary: str | None, error: str | None = None) -> CompactionResult:
        if error is not None:
            return CompactionResult(
                summary=previous_summary,
                kept=all_messages,
                removed=[],
                strategy=strategy,
                error=error,
                tokens_before=tokens_before,
                tokens_after=tokens_before,
            )
        return CompactionResult(
            summary=summary,
            kept=kept,
            removed=removed,
            strategy=strategy,
            tokens_before=tokens_before,
            tokens_after=estimate_tokens(kept, system),
            notes=notes,
        )

    if not removed:
        return result(previous_summary)
    if strategy != STRATEGY_SUMMARIZE:
        return result(previous_summary)

    try:
        summary = await summarize(removed, previous_summary)
    except Exception as exc:  # any provider/timeout failure: keep the history as it is
        return result(None, error=f"summary failed: {type(exc).__name__}: {exc}")
    if not summary or not summary.strip():
        return result(None, error="summary failed: the summarizer returned no text")
    return result(summary.strip())


# ----------------------------------------------------------------- memory flush


def needs_memory_flush(
    messages: Sequence[Message],
    *,
    context_window: int,
    system: str = "",
    compaction_count: int = 0,
    last_flush_compaction_count: int | None = None,
    reserve_tokens: int = MEMORY_FLUSH_RESERVE_TOKENS,
    soft_threshold_tokens: int = MEMORY_FLUSH_SOFT_THRESHOLD_TOKENS,
) -> bool:
    """GoClaw's flush trigger: estimate >= window - 20,000 - 4,000, at most once per
    compaction cycle (pass the session's compaction counter and the counter value at
    the last flush). The loop also flushes before any compaction it runs."""
    if last_flush_compaction_count is not None and last_flush_compaction_count >= (compaction_count):
        return False
    window = context_window if context_window > 0 else DEFAULT_CONTEXT_WINDOW
    threshold = max(window - reserve_tokens - soft_threshold_tokens, 0)
    return estimate_tokens(messages, system) >= threshold


def memory_flush_messages(
    messages: Sequence[Message], *, recent: int = MEMORY_FLUSH_RECENT_MESSAGES
) -> list[Message]:
    """The flush turn's input: the ``recent`` latest messages (tool pairs kept whole)
    followed by the :data:`MEMORY_FLUSH_PROMPT` user message."""
    cut = _cut_keeping_messages(messages, recent)
    # Providers want the user first: widen back to the turn's user message when it is
    # near, otherwise narrow forward to the next one.
    back = next(
        (i for i in range(min(cut, len(messages) - 1), max(cut - recent, 0) - 1, -1)
         if messages[i].role == "user"),
        None,
    )  # fmt: skip
    if back is not None:
        cut = back
    else:
        cut = next((i for i in range(cut, len(messages)) if messages[i].role == "user"), cut)
    return [*messages[cut:], Message.user(MEMORY_FLUSH_PROMPT)]
