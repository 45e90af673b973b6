"""``send_file``: a file from the workspace to the person on the chat platform this
conversation came from (Discord, email, Telegram), through the channel adapter's
``send_attachment`` (a platform's 429 or 5xx retried as its error type says).

Only a conversation that belongs to a channel can send (the web chat has no such
delivery: the file is in the workspace already); the path is checked like every
workspace path (no links, no escape), the file read with ``O_NOFOLLOW`` within
``MAX_SEND_BYTES``.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from agents.engine.interfaces import RunContext, ToolTraits
from channels_app.attachments import size_text
from claw_platform.db import db_async
from tools_app.context import ToolContext, tool_context
from tools_app.guards.paths import display_path, open_nofollow, resolve_workspace_path
from tools_app.registry import TOOL_ERROR, Tool, ToolError

SENDS = ToolTraits(read_only=False, side_effects=True, parallel_safe=False, risk="medium")
MAX_SEND_BYTES = 10 * 1024 * 1024  # Discord's bot upload limit, the smallest of the platforms'
MAX_CAPTION_CHARS = 4000


def _conversation(context: ToolContext) -> Any:
    from channels_app.models import ChannelConversation

    conversation = (
        ChannelConversation.objects.unscoped()
        .select_related("channel", "channel__agent")
        .filter(session_id=context.session_id, tenant_id=context.tenant_id)
        .first()
    )
    if conversation is None or not conversation.channel.enabled:
        raise ToolError(
            TOOL_ERROR,
            "This conversation is not on a chat platform, so there is nowhere to send a file; "
            "it is in the workspace already.",
        )
    return conversation


def _read(context: ToolContext, requested: str) -> tuple[str, bytes]:
    path = resolve_workspace_path(context.workspace, requested, must_exist=True)
    if path.is_dir():
        raise ToolError(TOOL_ERROR, f"{requested!r} is a directory; send one file.")
    fd = open_nofollow(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
            raise ToolError("path_policy_blocked", f"{requested!r} cannot be read.")
        data = handle.read(MAX_SEND_BYTES + 1)
    if len(data) > MAX_SEND_BYTES:
        raise ToolError(TOOL_ERROR, f"{requested!r} is over {size_text(MAX_SEND_BYTES)}, too big to send.")
    if not data:
        raise ToolError(TOOL_ERROR, f"{requested!r} is empty.")
    return display_path(context.workspace, path), data


class SendFileTool(Tool):
    name = "send_file"
    description = (
        "Send a file from your workspace to the person you are talking with, as an attachment on "
        "the chat platform this conversation is on (Discord, email, Telegram), with an optional "
        "caption. Not for the web chat."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "maxLength": 1024},
            "caption": {"type": "string", "maxLength": MAX_CAPTION_CHARS},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    traits = SENDS
    timeout = 180.0
    max_output_chars = 1_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        from channels_app.adapters import adapter_for
        from channels_app.adapters.base import AdapterError, Target
        from channels_app.delivery import with_retries

        context = tool_context(ctx)
        conversation = await db_async(_conversation)(context)
        shown, content = await db_async(_read)(context, args["path"])
        adapter = adapter_for(conversation.channel)
        target = Target(conversation.chat_id, conversation.thread_id)
        name = shown.rsplit("/", 1)[-1]
        try:
            await with_retries(
                lambda: adapter.send_attachment(target, name, content, args.get("caption", ""))
            )
        except AdapterError as exc:
            later = " (the platform is busy; try again later)" if exc.retryable else ""
            raise ToolError(TOOL_ERROR, f"{shown} was not sent: {exc}{later}") from None
        return f"Sent {shown} ({size_text(len(content))}) to the chat."
