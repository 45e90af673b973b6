"""Slash commands (S4): parsed before any LLM call, as IronClaw's SubmissionParser.

``parse_slash_command`` only recognises and normalises; the Django side runs the
command (``/stop`` cancels the session's run, ``/new`` opens a thread, ...). A text
that starts with ``/`` but names no known command is *not* a command: it goes to the
model as ordinary text (a path like ``/etc/hosts`` or a typo must not vanish).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

# Canonical name -> aliases (IronClaw's table, plus ZeroClaw's /models).
_ALIASES: dict[str, tuple[str, ...]] = {
    "help": ("help", "?"),
    "new": ("new",),
    "stop": ("stop", "interrupt"),
    "compact": ("compact",),
    "clear": ("clear",),
    "summarize": ("summarize", "summary"),
    "undo": ("undo",),
    "redo": ("redo",),
    "model": ("model",),
    "models": ("models",),
    "agent": ("agent", "agents"),
    "tools": ("tools",),
    "skills": ("skills",),
    "status": ("status",),
    "ping": ("ping",),
    "version": ("version",),
    "heartbeat": ("heartbeat",),
    "thread": ("thread",),
    "resume": ("resume",),
}
_LOOKUP = {alias: name for name, aliases in _ALIASES.items() for alias in aliases}

COMMANDS: tuple[str, ...] = tuple(_ALIASES)

# "/model@my_bot gpt-4o" -- chat platforms append the bot's name in groups.
_COMMAND_RE = re.compile(r"^/(?P<cmd>[A-Za-z?][\w?-]*)(?:@[\w.]+)?(?:\s+(?P<args>.*))?$", re.S)


@dataclass(frozen=True, slots=True)
class SlashCommand:
    """A recognised command. ``args`` is the rest of the line, stripped.

    ``error`` is set when the command is known but its argument is not valid (e.g.
    ``/resume`` without a thread id); the caller replies with it instead of running.
    """

    name: str
    args: str = ""
    raw: str = ""
    error: str | None = None

    @property
    def bypasses_thread_state(self) -> bool:
        """System commands answer at once, even while a run is active (IronClaw)."""
        return self.name in {
            "help",
            "version",
            "tools",
            "skills",
            "ping",
            "model",
            "models",
            "status",
            "stop",
        }


def _valid_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def parse_slash_command(text: str) -> SlashCommand | None:
    """Recognise a slash command, or return ``None`` for ordinary text.

    Case-insensitive; ``/stop`` = ``/interrupt``, ``/summary`` = ``/summarize``,
    ``/?`` = ``/help``, ``/thread new`` = ``/new``; ``/thread`` and ``/resume``
    take a thread UUID; ``/model [name]`` takes an optional model name.
    """
    stripped = text.strip()
    if not stripped.startswith("/") or "\n" in stripped:
        return None
    match = _COMMAND_RE.match(stripped)
    if match is None:
        return None
    name = _LOOKUP.get(match.group("cmd").lower())
    if name is None:
        return None
    args = (match.group("args") or "").strip()

    if name == "thread":
        if args.lower() == "new":
            return SlashCommand("new", "", stripped)
        if not args:
            return SlashCommand("thread", "", stripped, "usage: /thread <thread id> or /thread new")
        if not _valid_uuid(args):
            return SlashCommand("thread", args, stripped, f"not a thread id: {args}")
    elif name == "resume":
        if not args:
            return SlashCommand("resume", "", stripped, "usage: /resume <thread id>")
        if not _valid_uuid(args):
            return SlashCommand("resume", args, stripped, f"not a thread id: {args}")
    elif name == "model" and args and len(args.split()) > 1:
        return SlashCommand("model", args, stripped, "usage: /model [name]")
    return SlashCommand(name, args, stripped)


# --------------------------------------------------------------- approval replies

# A chat reply to a pending approval (T13): MicroClaw's and IronClaw's keywords. Only a
# short reply that *is* one of these phrases counts; "no, do it differently" is a
# message, not a decision.
_APPROVE = frozenset(
    {"yes", "y", "ok", "okay", "approve", "approved", "go ahead", "proceed", "do it", "allow", "yes please"}
)
_APPROVE_ALWAYS = frozenset({"always", "a", "always allow", "approve always", "yes always"})
_DENY = frozenset(
    {"no", "n", "deny", "denied", "reject", "cancel", "don't", "dont", "do not", "stop", "no thanks"}
)
_REPLY_TRIM = re.compile(r"^[\s\"'`]+|[\s.!\"'`]+$")


@dataclass(frozen=True, slots=True)
class ApprovalReply:
    approved: bool
    always: bool = False


def parse_approval_reply(text: str) -> ApprovalReply | None:
    """``approve`` / ``go ahead`` / ``yes`` ... approve, ``always`` approves for the
    rest of the session, ``deny`` / ``cancel`` / ``no`` ... deny; anything else is
    ``None`` (an ordinary message)."""
    phrase = _REPLY_TRIM.sub("", text.strip().lower())
    if len(phrase) > 20:
        return None
    if phrase in _APPROVE_ALWAYS:
        return ApprovalReply(True, always=True)
    if phrase in _APPROVE:
        return ApprovalReply(True)
    if phrase in _DENY:
        return ApprovalReply(False)
    return None
