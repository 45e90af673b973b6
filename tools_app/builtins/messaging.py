"""send_message and export_chat (T8).

- ``send_message`` posts a text into another session of the same tenant (its active
  thread, as a message marked with the sender), through ``do_post_session_message``:
  one the run's person may act in (the member rule: a member's run posts only into
  that member's own sessions; an owner's or admin's into any).
- ``export_chat`` writes a session's history (this one, or another of the same user
  and tenant) as Markdown or JSON into the workspace, and returns the file's path.

A session of another tenant is "not found", the same answer as a missing one.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.actions.chat_export import export_chat
from agents.engine.interfaces import RunContext, ToolTraits
from agents.engine.types import Message as EngineMessage
from agents.models import Message, Session, Thread
from claw_platform.audit.actions import record_audit_event
from claw_platform.db import db_async
from claw_platform.tenancy.member_rule import Caller
from tools_app.context import ToolContext, tool_context
from tools_app.guards.paths import display_path, resolve_workspace_path
from tools_app.registry import TOOL_ERROR, Tool, ToolError

SENDS = ToolTraits(read_only=False, side_effects=True, parallel_safe=False, risk="medium")
EXPORTS = ToolTraits(read_only=False, side_effects=True, parallel_safe=False, risk="low")
MAX_MESSAGE_CHARS = 8_000


def _find_session(context: ToolContext, session_id: str) -> Session:
    try:
        key = uuid.UUID(str(session_id))
    except ValueError:
        raise ToolError(TOOL_ERROR, f"There is no session {session_id!r}.") from None
    session = Session._base_manager.filter(pk=str(key), tenant_id=context.tenant_id).first()
    if session is None:
        raise ToolError(TOOL_ERROR, f"There is no session {session_id!r}.")
    return session


@transaction.atomic
def do_post_session_message(target: Session, text: str, *, sender: ToolContext, acting_user: Any) -> Message:
    """Append ``text`` to ``target``'s active thread as a message from another session."""
    thread_id = target.active_thread_id
    if thread_id is None:
        raise ToolError(TOOL_ERROR, "That session has no open thread to post into.")
    thread = Thread._base_manager.select_for_update().get(pk=thread_id, tenant_id=target.tenant_id)
    thread.last_seq += 1
    Thread._base_manager.filter(pk=thread.pk).update(last_seq=thread.last_seq)
    body = f"[Message from session {sender.session_id} (agent {sender.agent_slug})]\n{text}"
    message = Message._base_manager.create(
        tenant_id=target.tenant_id,
        session_id=target.pk,
        thread_id=thread.pk,
        seq=thread.last_seq,
        role="assistant",
        parts=EngineMessage.assistant(body).to_dict()["parts"],
    )
    Session._base_manager.filter(pk=target.pk).update(last_activity_at=timezone.now())
    record_audit_event(
        action="session.message_sent",
        actor=acting_user,
        tenant_id=target.tenant_id,
        obj=message,
        diff={"from_session": [None, sender.session_id], "to_session": [None, str(target.pk)]},
    )
    return message


class SendMessageTool(Tool):
    name = "send_message"
    description = (
        "Send a text message into another conversation (session) of your team, by its session id. "
        "The message appears there marked as coming from this conversation."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "session_id": {"type": "string", "minLength": 1, "maxLength": 64},
            "text": {"type": "string", "minLength": 1, "maxLength": MAX_MESSAGE_CHARS},
        },
        "required": ["session_id", "text"],
        "additionalProperties": False,
    }
    traits = SENDS
    timeout = 15.0
    max_output_chars = 1_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        context = tool_context(ctx)

        def send() -> str:
            target = _find_session(context, args["session_id"])
            person = Caller(context.tenant_id, context.user_id, context.role)
            if not person.acts_in_session_of(target.user_id):
                # Another member's chat is refused like a missing one.
                raise ToolError(TOOL_ERROR, f"There is no session {args['session_id']!r}.")
            if str(target.pk) == context.session_id:
                raise ToolError(TOOL_ERROR, "That is this conversation; just answer here.")
            if target.active_thread_id is None:
                raise ToolError(TOOL_ERROR, "That session has no open thread to post into.")
            do_post_session_message(
                target, args["text"], sender=context, acting_user=f"agent:{context.agent_slug}"
            )
            return f"Sent to session {target.pk}."

        return await db_async(send)()


class ExportChatTool(Tool):
    name = "export_chat"
    description = (
        "Export a conversation's history (default: this one) to a file in your workspace, as "
        "markdown (default) or json. Returns the file's path."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "session_id": {"type": "string", "maxLength": 64},
            "format": {"enum": ["markdown", "json"]},
            "path": {"type": "string", "minLength": 1, "maxLength": 300},
        },
        "additionalProperties": False,
    }
    traits = EXPORTS
    timeout = 30.0
    max_output_chars = 1_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        context = tool_context(ctx)
        return await db_async(self._export)(context, args)

    def _export(self, context: ToolContext, args: dict[str, Any]) -> str:
        session = _find_session(context, args.get("session_id") or context.session_id)
        if str(session.pk) != context.session_id and session.user_id != context.user_id:
            # Another person's conversation is not this user's to export.
            raise ToolError(TOOL_ERROR, f"There is no session {args.get('session_id')!r}.")
        fmt = args.get("format", "markdown")
        body, count = export_chat(session, fmt)
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        requested = (
            args.get("path")
            or f"exports/chat-{str(session.pk)[:8]}-{stamp}.{'md' if fmt == 'markdown' else 'json'}"
        )
        from tools_app.builtins.files import _write_text

        path, _ = _write_text(context, requested, body)
        resolve_workspace_path(context.workspace, requested)
        return f"Exported {count} messages to {display_path(context.workspace, path)}."
