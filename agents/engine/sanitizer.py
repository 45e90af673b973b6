"""Output sanitizer for final assistant replies (E12, E13).

GoClaw's ``SanitizeAssistantContent``: seven steps, always in this order.

1. strip garbled tool XML (``<tool_call>``, ``<function_call>``, ``<tool_use>``,
   ``<minimax:tool_call>``, ``<parameter name=...>`` ... that some models print);
2. strip downgraded text tool calls (``[Tool Call: ...]``, ``[Tool Result ...]``,
   ``[Historical context: ...]`` and the lines that follow them);
3. strip thinking tags (``<think>``, ``<thinking>``, ``<thought>``,
   ``<antThinking>``); their content goes to ``thinking`` and is shown inline only
   when the agent is set to show thinking;
4. strip ``<final>`` wrappers, keeping what is inside;
5. strip echoed ``[System Message]`` blocks;
6. collapse consecutive duplicate paragraphs (model stutter);
7. strip leading blank lines (indentation of the first real line is kept).

Steps 1, 2, 4 and 5 leave fenced code blocks alone, so a reply that *shows* tool-call XML
in a code sample survives. A reply that is only ``NO_REPLY`` is silent: stored but
not delivered (E13).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

NO_REPLY_TOKEN = "NO_REPLY"

_FENCE_RE = re.compile(r"^[ \t]*(?:```|~~~)[^\n]*\n.*?^[ \t]*(?:```|~~~)[ \t]*$", re.M | re.S)

_TOOL_XML_TAGS = r"(?:tool_call|tool_calls|function_call|function_calls|tool_use|minimax:tool_call)"
# Whole blocks first (content included), then any stray open/close tag left over.
_GARBLED_BLOCK_RE = re.compile(
    rf"<{_TOOL_XML_TAGS}\b[^>]*>.*?(?:</{_TOOL_XML_TAGS}>|\Z)"
    r"|<invoke\b[^>]*>.*?(?:</invoke>|\Z)"
    r"|<function=[^>]*>.*?(?:</function>|\Z)",
    re.S | re.I,
)
_GARBLED_TAG_RE = re.compile(
    rf"</?{_TOOL_XML_TAGS}\b[^>]*>"
    r"|<parameter\b[^>]*>.*?</parameter>|</?parameter\b[^>]*>"
    r"|<arg_key>.*?</arg_key>|<arg_value>.*?</arg_value>|</?arg_(?:key|value)>"
    r"|</?invoke\b[^>]*>|</function>",
    re.S | re.I,
)

_DOWNGRADED_PREFIXES = ("[tool call:", "[tool result", "[historical context:")
_ECHOED_SYSTEM_PREFIXES = ("[system message]",)

_THINK_TAGS = r"(?:think|thinking|thought|antthinking)"
_THINK_BLOCK_RE = re.compile(rf"<({_THINK_TAGS})\b[^>]*>(.*?)</\1\s*>", re.S | re.I)
_THINK_OPEN_RE = re.compile(rf"<{_THINK_TAGS}\b[^>]*>", re.I)
_THINK_CLOSE_RE = re.compile(rf"</{_THINK_TAGS}\s*>", re.I)
_FINAL_TAG_RE = re.compile(r"<\s*/?\s*final\s*>", re.I)

# Silent replies may come wrapped in light markdown or punctuation.
_SILENT_RE = re.compile(r"^[\s*_`'\".!:\[\]()]*NO_REPLY[\s*_`'\".!:\[\]()]*$")


@dataclass
class SanitizedOutput:
    """A cleaned reply: ``text`` to store/deliver, extracted ``thinking``, and
    ``silent`` when the reply is ``NO_REPLY`` (store, do not deliver)."""

    text: str
    thinking: str
    silent: bool


def is_silent_reply(text: str) -> bool:
    """True when the reply is only the ``NO_REPLY`` token (E13).

    Surrounding whitespace, quotes, backticks or bold markers are tolerated; a real
    answer that merely mentions NO_REPLY is not silent.
    """
    if NO_REPLY_TOKEN not in text or len(text) > 64:
        return False
    return _SILENT_RE.match(text) is not None


def _outside_code(text: str, fn: Callable[[str], str]) -> str:
    """Apply ``fn`` to the parts of ``text`` that are not fenced code blocks."""
    if "```" not in text and "~~~" not in text:
        return fn(text)
    out: list[str] = []
    pos = 0
    for match in _FENCE_RE.finditer(text):
        out.append(fn(text[pos : match.start()]))
        out.append(match.group(0))
        pos = match.end()
    out.append(fn(text[pos:]))
    return "".join(out)


def strip_garbled_tool_xml(text: str) -> str:
    """Step 1: remove tool-call XML printed as text; all-XML replies become empty."""
    lowered = text.lower()
    if not any(
        marker in lowered for marker in ("<tool", "<function", "<invoke", "<parameter", "<minimax", "<arg_")
    ):
        return text
    cleaned = _GARBLED_BLOCK_RE.sub("", text)
    cleaned = _GARBLED_TAG_RE.sub("", cleaned)
    return cleaned if cleaned.strip() else ""


def _skip_blocks_after(text: str, prefixes: tuple[str, ...]) -> str:
    """Drop each line starting with one of ``prefixes`` and the lines after it,
    up to the next blank line (how GoClaw scans without look-ahead)."""
    lowered = text.lower()
    if not any(p in lowered for p in prefixes):
        return text
    kept: list[str] = []
    skipping = False
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.lower().startswith(prefixes):
            skipping = True
            continue
        if skipping:
            if not stripped:
                skipping = False
            continue
        kept.append(line)
    return "\n".join(kept)


def strip_downgraded_tool_call_text(text: str) -> str:
    """Step 2: remove ``[Tool Call: ...]`` / ``[Tool Result ...]`` blocks."""
    return _skip_blocks_after(text, _DOWNGRADED_PREFIXES)


def extract_thinking(text: str) -> tuple[str, list[str]]:
    """Step 3: take thinking blocks out of ``text``; return (text, thoughts).

    Handles a dangling ``</think>`` (some servers put the opening tag in the prompt
    template, so everything before it is thinking) and an unclosed opening tag (the
    rest of the output is thinking).
    """
    if "<" not in text:
        return text, []
    thoughts: list[str] = []

    def take(match: re.Match[str]) -> str:
        inner = match.group(2).strip()
        if inner:
            thoughts.append(inner)
        return ""

    text = _THINK_BLOCK_RE.sub(take, text)
    close = _THINK_CLOSE_RE.search(text)
    if close is not None:
        head = text[: close.start()].strip()
        if head:
            thoughts.insert(0, head)
        text = _THINK_CLOSE_RE.sub("", text[close.end() :])
    opening = _THINK_OPEN_RE.search(text)
    if opening is not None:
        tail = text[opening.end() :].strip()
        if tail:
            thoughts.append(tail)
        text = text[: opening.start()]
    return text, thoughts


def strip_final_tags(text: str) -> str:
    """Step 4: remove ``<final>``/``</final>`` but keep what they wrap."""
    if "final" not in text.lower():
        return text
    return _FINAL_TAG_RE.sub("", text)


def strip_echoed_system_messages(text: str) -> str:
    """Step 5: remove ``[System Message]`` blocks the model echoed or invented."""
    return _skip_blocks_after(text, _ECHOED_SYSTEM_PREFIXES)


def collapse_duplicate_paragraphs(text: str) -> str:
    """Step 6: drop a paragraph identical (trimmed) to the one just before it.

    Paragraphs inside fenced code are never collapsed: repeated lines in code are
    usually deliberate.
    """
    if "\n\n" not in text:
        return text
    blocks = text.split("\n\n")
    kept: list[str] = []
    previous: str | None = None
    in_fence = False
    for block in blocks:
        fences = block.count("```") + block.count("~~~")
        trimmed = block.strip()
        if not in_fence and fences == 0 and trimmed and trimmed == previous:
            continue
        kept.append(block)
        previous = trimmed if trimmed else previous
        if fences % 2 == 1:
            in_fence = not in_fence
    return "\n\n".join(kept)


def strip_leading_blank_lines(text: str) -> str:
    """Step 7: remove whitespace-only lines at the start, keeping indentation."""
    pos = 0
    while True:
        newline = text.find("\n", pos)
        if newline == -1:
            return text[pos:] if text[pos:].strip() else ""
        if text[pos:newline].strip():
            return text[pos:]
        pos = newline + 1


def _quote(thought: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in thought.split("\n"))


def sanitize_output(text: str, *, show_thinking: bool = False) -> SanitizedOutput:
    """Clean a final assistant reply with GoClaw's seven steps (E12) and detect a
    silent ``NO_REPLY`` (E13).

    Thinking is always returned in ``thinking``; with ``show_thinking`` it is also
    put at the top of ``text`` as a block quote. The result is whitespace-trimmed.
    """
    text = _outside_code(text, strip_garbled_tool_xml)
    text = _outside_code(text, strip_downgraded_tool_call_text)

    # Thinking often contains code fences, so this step sees the whole text.
    text, thoughts = extract_thinking(text)
    text = _outside_code(text, strip_final_tags)
    text = _outside_code(text, strip_echoed_system_messages)
    text = collapse_duplicate_paragraphs(text)
    # GoClaw ends the pipeline with TrimSpace.
    text = strip_leading_blank_lines(text).strip()

    thinking = "\n\n".join(thoughts)
    silent = is_silent_reply(text)
    if show_thinking and thinking and not silent:
        text = f"{_quote(thinking)}\n\n{text}" if text else _quote(thinking)
    return SanitizedOutput(text=text, thinking=thinking, silent=silent)
