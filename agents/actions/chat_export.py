"""A conversation as a file, Markdown or JSON (U3 export, T8 ``export_chat``).

One code path for the chat page's Export links and the ``export_chat`` tool: the
session's stored messages (undone ones left out), oldest first. Access is the
caller's business (the chat pages check the member rule, the tool the run's user).
"""

from __future__ import annotations

import json
from typing import Any

from agents.engine.types import Message as EngineMessage
from agents.engine.types import TextPart, ToolCallPart, ToolResultPart
from agents.models import Message, MessageState, Session

MAX_EXPORT_MESSAGES = 5_000
FORMATS = ("markdown", "json")


def export_rows(session: Session) -> list[tuple[str, list[dict[str, Any]], Any]]:
    """(role, parts, created_at) of the session's visible messages, oldest first."""
    return list(
        Message._base_manager.filter(session_id=session.pk, tenant_id=session.tenant_id)
        .exclude(state=MessageState.UNDONE)
        .order_by("created_at", "seq")
        .values_list("role", "parts", "created_at")[:MAX_EXPORT_MESSAGES]
    )


def export_chat(session: Session, fmt: str) -> tuple[str, int]:
    """The session as ``fmt`` ("markdown" or "json"): the text and its message count."""
    rows = export_rows(session)
    if fmt == "json":
        body = json.dumps(
            {
                "session": str(session.pk),
                "title": session.title or "Conversation",
                "agent": session.agent.slug,
                "messages": [
                    {"role": role, "parts": [_json_part(p) for p in parts], "created_at": created.isoformat()}
                    for role, parts, created in rows
                ],
            },
            ensure_ascii=False,
            indent=1,
        )
        return body, len(rows)
    out = [f"# {session.title or 'Conversation'}", ""]
    for role, parts, created in rows:
        lines = message_lines(EngineMessage.from_dict({"role": role, "parts": parts}))
        if lines:
            out += [f"## {role} ({created.isoformat(timespec='seconds')})", "", *lines, ""]
    return "\n".join(out), len(rows)


def file_name(session: Session, fmt: str) -> str:
    stem = "".join(c if c.isalnum() or c in "-_" else "-" for c in (session.title or "chat"))[:60].strip("-")
    return f"{stem or 'chat'}-{str(session.pk)[:8]}.{'json' if fmt == 'json' else 'md'}"


def message_lines(message: EngineMessage) -> list[str]:
    lines: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart) and part.text.strip():
            lines.append(part.text)
        elif isinstance(part, ToolCallPart):
            lines.append(f"> tool call `{part.name}` {json.dumps(part.arguments, ensure_ascii=False)[:500]}")
        elif isinstance(part, ToolResultPart):
            lines.append(f"> tool result `{part.name}`: {part.content[:500]}")
    return lines


def _json_part(part: dict[str, Any]) -> dict[str, Any]:
    # An image's bytes are not exported; its kind is.
    if part.get("type") == "image":
        return {"type": "image", "media_type": part.get("media_type", "")}
    return part
