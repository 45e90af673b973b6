"""A reply on its way to a platform, kept until every part of it is delivered (the
undelivered-reply sweep, ``channels_app.outbox``): written before the first part is
sent, advanced part by part, so a retry sends only what did not arrive."""

from __future__ import annotations

from django.db import models

from channels_app.models.channel import Channel
from claw_platform.tenancy.models import TenantOwned


class OutboundStatus(models.TextChoices):
    PENDING = "pending", "Pending (being sent, or waiting for a retry)"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed (the platform refused it for good)"


class OutboundReply(TenantOwned):
    # Seen by the member whose chat it answers (the member rule), owners and admins.
    MEMBER_OWNER = "run__session__user"

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="outbound")
    chat_id = models.CharField(max_length=200)
    thread_id = models.CharField(max_length=200, blank=True)
    parts = models.JSONField(default=list)
    draft_message_id = models.CharField(max_length=200, blank=True)
    sent_parts = models.PositiveIntegerField(default=0)
    # Set (committed) before part ``sent_parts`` goes out, cleared when it is recorded
    # as sent: a row found with it set was cut off between the two.
    in_flight_since = models.DateTimeField(null=True, blank=True)
    message_ids = models.JSONField(default=list)
    status = models.CharField(max_length=16, choices=OutboundStatus.choices, default=OutboundStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    update = models.ForeignKey(
        "channels_app.InboundUpdate", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    run = models.ForeignKey("agents.Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="outbound_due")]

    def __str__(self) -> str:
        return f"reply to {self.chat_id} ({self.status})"
