"""Where a session's replies go: the channel, chat, sender and thread it maps to (S5)."""

from __future__ import annotations

from django.db import models

from channels_app.models.channel import Channel
from claw_platform.tenancy.models import TenantOwned


class ChannelConversation(TenantOwned):
    MEMBER_OWNER = "session__user"

    session = models.OneToOneField("agents.Session", on_delete=models.CASCADE, related_name="+")
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="conversations")
    chat_id = models.CharField(max_length=200)
    sender_id = models.CharField(max_length=200)
    thread_id = models.CharField(max_length=200, blank=True)
    is_group = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.channel_id}:{self.chat_id}/{self.sender_id}"
