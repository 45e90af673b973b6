"""Input guard for user messages (E10, E11).

GoClaw's InputGuard: six regular expressions that spot common prompt-injection
attempts, and four modes. Detection is the point; by default nothing is refused
(``warn``). Independently of the mode, an over-long message is cut to
:data:`MAX_USER_MESSAGE_CHARS` with a notice telling the model so, never rejected.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

logger = logging.getLogger("claw.security")

MAX_USER_MESSAGE_CHARS = 32_768
SECURITY_EVENT = "security.injection_detected"
GUARD_MODES = ("off", "log", "warn", "block")

# Order is the report order. Each pattern is anchored on distinctive words so a long
# message is scanned in linear time.
INJECTION_PATTERNS: dict[str, re.Pattern[str]] = {
    "ignore_instructions": re.compile(
        r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:all\s+|any\s+|the\s+|your\s+)*"
        r"(?:previous|prior|above|earlier|preceding|system|initial|original)\s+"
        r"(?:instructions?|rules|prompts?|directives|guidelines|messages?)",
        re.IGNORECASE,
    ),
    "role_override": re.compile(
        r"\byou\s+are\s+now\s+(?:a|an|the|my|no\s+longer)\b"
        r"|\bfrom\s+now\s+on,?\s+you\s+(?:are|will\s+act|must\s+act)\b"
        r"|\b(?:act|behave)\s+as\s+if\s+you\s+(?:are|were)\s+(?:a|an|the)\b"
        r"|\bpretend\s+(?:to\s+be|you\s+are)\b",
        re.IGNORECASE,
    ),
    "system_tags": re.compile(
        r"<\|?\s*(?:im_start|im_end|system|endoftext|start_header_id|eot_id)\s*\|?>"
        r"|\[/?(?:SYSTEM|INST)\]|<<\s*/?SYS\s*>>|</?system>",
        re.IGNORECASE,
    ),
    "instruction_injection": re.compile(
        r"\b(?:new|updated|revised|real|actual)\s+(?:system\s+)?instructions?\s*:"
        r"|\b(?:override|system\s+prompt|system\s+override|admin\s+override)\s*:",
        re.IGNORECASE,
    ),
    "null_bytes": re.compile(r"\x00"),
    "delimiter_escape": re.compile(
        r"\bend\s+of\s+(?:the\s+)?(?:system|instructions?|prompt|context)\b"
        r"|</\s*(?:instructions?|prompt|context|user_input|user)\s*>"
        r"|-{3,}\s*(?:end|begin)\s+(?:system|instructions?|prompt)",
        re.IGNORECASE,
    ),
}


@dataclass
class GuardResult:
    """Outcome of :func:`check_user_input`.

    ``text`` is what the model should see (null bytes removed, truncated with a
    notice if it was too long). ``findings`` lists the names of the patterns that
    matched. ``notice`` is a user-readable reason when ``blocked``, otherwise the
    truncation notice given to the model (or ``None``).
    """

    text: str
    findings: list[str] = field(default_factory=list)
    blocked: bool = False
    truncated: bool = False
    notice: str | None = None


def scan_for_injection(text: str) -> list[str]:
    """Names of the injection patterns found in ``text``, in a stable order."""
    return [name for name, pattern in INJECTION_PATTERNS.items() if pattern.search(text)]


def truncation_notice(original_chars: int, kept_chars: int) -> str:
    return (
        f"[Notice: the user's message was {original_chars:,} characters long and was "
        f"truncated to the first {kept_chars:,} characters. Tell the user if the missing "
        "part matters for your answer.]"
    )


def check_user_input(
    text: str, mode: str = "warn", *, max_chars: int = MAX_USER_MESSAGE_CHARS
) -> GuardResult:
    """Scan a user message for prompt injection and cap its length (E10, E11).

    Modes: ``off`` (no scan), ``log`` (info log), ``warn`` (warning log, the
    default), ``block`` (warning log and ``blocked=True`` with a reason in
    ``notice``). Every detection logs ``security.injection_detected`` on the
    ``claw.security`` logger. A message longer than ``max_chars`` is truncated and
    a notice appended for the model; it is never rejected for its length.
    """
    if mode not in GUARD_MODES:
        raise ValueError(f"unknown input guard mode {mode!r}; expected one of {GUARD_MODES}")

    original_chars = len(text)
    truncated = original_chars > max_chars
    if truncated:
        text = text[:max_chars]

    findings = [] if mode == "off" else scan_for_injection(text)
    # PostgreSQL text columns cannot hold NUL, and no model needs one: always drop them.
    if "\x00" in text:
        text = text.replace("\x00", "")

    notice: str | None = None
    if truncated:
        notice = truncation_notice(original_chars, max_chars)
        text = f"{text}\n\n{notice}"

    blocked = False
    if findings:
        extra = {
            "event": SECURITY_EVENT,
            "patterns": findings,
            "mode": mode,
            "message_chars": original_chars,
        }
        level = logging.INFO if mode == "log" else logging.WARNING
        logger.log(level, SECURITY_EVENT, extra=extra)
        if mode == "block":
            blocked = True
            notice = (
                "Your message was not processed because it looks like an attempt to "
                "override the assistant's instructions (" + ", ".join(findings) + "). "
                "Please rephrase it."
            )

    return GuardResult(text=text, findings=findings, blocked=blocked, truncated=truncated, notice=notice)
