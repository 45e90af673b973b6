"""Repair a conversation before it is sent to a provider (P4).

History reconstructed after compaction, pruning, a crash or an edit can break the
rules vendors enforce (Anthropic answers 400 to all of these):

- a tool result must answer a tool call of the assistant message right before it;
- every tool call must get a result before the conversation goes on;
- no empty messages or blank text blocks;
- roles alternate, and the first non-system message is the user's.

:func:`repair_messages` fixes these on the canonical form, vendor-neutral. It is a
pure function: the input list and its messages are never changed.
"""

from __future__ import annotations

from agents.engine.types import (
    FinishPart,
    Message,
    Part,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

SYNTHETIC_RESULT_TEXT = (
    "This tool call was interrupted before it returned a result; it may or may not have taken effect."
)
SYNTHETIC_RESULT_ERROR_TYPE = "interrupted"
# Anthropic requires the first message to be the user's. When history starts with
# the assistant (e.g. after compaction), this stands in rather than dropping content.
LEADING_USER_TEXT = "[conversation continued]"


def repair_messages(messages: list[Message]) -> list[Message]:
    """Return a copy of ``messages`` that providers accept.

    Steps: drop blank text parts and empty messages; merge consecutive same-role
    messages; drop tool results that answer no pending call of the preceding assistant
    message (orphans, duplicates); add an error result for every call left unanswered;
    merge again (dropping orphans can make neighbours meet); put a user message first
    if the conversation would start with the assistant or a tool.
    """
    if _already_valid(messages):
        # The common case (history the engine already repaired): one cheap pass
        # instead of four rebuilding passes over every message of the request.
        return list(messages)
    cleaned = _merge_same_role(_drop_empty(messages))
    paired = _merge_same_role(_drop_empty(_pair_tool_results(cleaned)))
    return _ensure_user_first(paired)


def _blank(text: str) -> bool:
    return not text or text.isspace()


def _already_valid(messages: list[Message]) -> bool:
    """True when no repair step would change anything."""
    previous_role = ""
    pending: set[str] = set()
    seen_non_system = False
    for message in messages:
        role = message.role
        if role == previous_role:
            return False
        if not seen_non_system and role != "system":
            if role != "user":
                return False
            seen_non_system = True
        has_content = False
        for part in message.parts:
            if isinstance(part, TextPart):
                if _blank(part.text):
                    return False
                has_content = True
            elif not isinstance(part, FinishPart):
                has_content = True
        if not has_content:
            return False
        if role == "tool":
            for part in message.parts:
                if isinstance(part, ToolResultPart):
                    if part.tool_call_id not in pending:
                        return False
                    pending.discard(part.tool_call_id)
            if pending:
                return False
        elif pending:
            return False
        if role == "assistant":
            pending = {call.id for call in message.tool_calls}
        previous_role = role
    return not pending


def _is_content(part: Part) -> bool:
    if isinstance(part, TextPart):
        return not _blank(part.text)
    return not isinstance(part, FinishPart)


def _drop_empty(messages: list[Message]) -> list[Message]:
    out: list[Message] = []
    for message in messages:
        parts = [p for p in message.parts if not (isinstance(p, TextPart) and _blank(p.text))]
        if any(_is_content(p) for p in parts):
            out.append(Message(message.role, parts))
    return out


def _merge_same_role(messages: list[Message]) -> list[Message]:
    out: list[Message] = []
    for message in messages:
        if out and out[-1].role == message.role:
            out[-1] = Message(message.role, [*out[-1].parts, *message.parts])
        else:
            out.append(Message(message.role, list(message.parts)))
    return out


def _synthetic_results(calls: list[ToolCallPart]) -> list[Part]:
    return [
        ToolResultPart(
            tool_call_id=call.id,
            name=call.name,
            content=SYNTHETIC_RESULT_TEXT,
            is_error=True,
            error_type=SYNTHETIC_RESULT_ERROR_TYPE,
        )
        for call in calls
    ]


def _pair_tool_results(messages: list[Message]) -> list[Message]:
    out: list[Message] = []
    # Calls of the latest assistant message still waiting for a result, in call order.
    pending: dict[str, ToolCallPart] = {}

    def flush_pending() -> None:
        if pending:
            out.append(Message("tool", _synthetic_results(list(pending.values()))))
            pending.clear()

    for message in messages:
        if message.role == "tool":
            kept: list[Part] = []
            for part in message.parts:
                # An orphan or a duplicate: no call is waiting for this result.
                if isinstance(part, ToolResultPart) and pending.pop(part.tool_call_id, None) is None:
                    continue
                kept.append(part)
            # Missing results go with the real ones, in the same tool message.
            kept.extend(_synthetic_results(list(pending.values())))
            pending.clear()
            out.append(Message("tool", kept))
            continue
        flush_pending()
        out.append(message)
        if message.role == "assistant":
            pending = {call.id: call for call in message.tool_calls}
    flush_pending()
    return out


def _ensure_user_first(messages: list[Message]) -> list[Message]:
    for index, message in enumerate(messages):
        if message.role == "system":
            continue
        if message.role != "user":
            return [*messages[:index], Message.user(LEADING_USER_TEXT), *messages[index:]]
        break
    return messages
