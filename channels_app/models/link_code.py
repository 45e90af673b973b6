"""A one-time code that links a chat-platform account to a member (as device pairing
does): the member generates it in the web chat, then sends ``/link CODE`` to the bot
from the platform account; only its hash is stored."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from claw_platform.crypto import DigestField
from claw_platform.tenancy.models import TenantOwned


class ChannelLinkCode(TenantOwned):
    MEMBER_OWNER = "user"  # a member sees their own codes only (the member rule)

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    code_hash = DigestField(max_length=64, unique=True, editable=False)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True, editable=False)
    link = models.ForeignKey(
        "channels_app.ChannelLink", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    AUDIT_EXCLUDE = frozenset({"code_hash"})

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"link code of {self.user_id}"
