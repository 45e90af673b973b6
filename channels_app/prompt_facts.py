"""What a chat-platform conversation changes in the prompt: a group chat leaves the
member's personal memory (MEMORY.md) out (E16), and the channel's prompt override
is added (CH4). Imported by the run's prompt step only for sessions of a channel."""

from __future__ import annotations

import dataclasses
from typing import Any

from agents.engine.prompt import PromptContext

CHANNEL_KINDS = frozenset({"telegram", "slack", "whatsapp", "webhook_channel"})


def with_channel_facts(prompt: PromptContext, session_id: Any) -> PromptContext:
    from channels_app.models import ChannelConversation

    row = (
        ChannelConversation.objects.unscoped()
        .filter(session_id=session_id)
        .values_list("is_group", "channel__prompt_override")
        .first()
    )
    if row is None:
        return prompt
    is_group, override = row
    extra = "\n\n".join(p for p in [prompt.extra_context or "", override.strip()] if p)
    return dataclasses.replace(prompt, is_group_chat=bool(is_group), extra_context=extra or None)
