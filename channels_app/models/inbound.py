"""Every inbound update as received, written before the platform gets its answer and
unique per (channel, platform id): a platform's retry of an update is a duplicate."""

from __future__ import annotations

from django.db import models

from channels_app.models.channel import Channel
from claw_platform.tenancy.models import TenantOwned


class InboundStatus(models.TextChoices):
    RECEIVED = "received", "Received"
    ANSWERED = "answered", "Answered (a run was started)"
    DECIDED = "decided", "An approval was decided"
    IGNORED = "ignored", "Ignored (a group message not for the agent)"
    REFUSED = "refused", "Refused (sender not linked)"
    FAILED = "failed", "Failed"


class InboundUpdate(TenantOwned):
    # Hangs off the session it was answered in (the member rule); updates that
    # opened none (ignored, refused) are seen by owners and admins only.
    MEMBER_OWNER = "session__user"

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="updates")
    platform_id = models.CharField(max_length=200)
    chat_id = models.CharField(max_length=200, blank=True)
    sender_id = models.CharField(max_length=200, blank=True)
    text = models.TextField(blank=True)
    # Several platform messages that are one (a Telegram album's media_group_id): they
    # are dispatched together, as one message (channels_app.receive).
    group_id = models.CharField(max_length=200, blank=True, default="")
    payload = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=InboundStatus.choices, default=InboundStatus.RECEIVED)
    detail = models.CharField(max_length=500, blank=True)
    session = models.ForeignKey(
        "agents.Session", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    run = models.ForeignKey("agents.Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-received_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["channel", "platform_id"], name="inbound_update_unique_platform_id"
            )
        ]
        indexes = [
            # The recovery sweep's look-up (channels_app.recovery): few rows wait at a time.
            models.Index(
                fields=["received_at"],
                condition=models.Q(status="received"),
                name="inbound_update_waiting",
            ),
            # The parts of a group still waiting to be gathered.
            models.Index(
                fields=["channel", "chat_id", "group_id"],
                condition=models.Q(status="received") & ~models.Q(group_id=""),
                name="inbound_update_waiting_group",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.channel_id}:{self.platform_id}"
