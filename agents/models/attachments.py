"""Files a member attached to a chat message (E23).

Images are kept here, with the session (tenant- and member-scoped like it, deleted
with it), and sent to a vision-capable model with the message, again when the turn
is regenerated, edited, retried or resumed, and with the history of the next
``CLAW_CHAT_IMAGE_TURNS`` turns (older ones become placeholders). Other files go
into the uploading member's own workspace; the row records where."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from agents.models.conversation import Session, Turn
from claw_platform.tenancy.models import TenantOwned


class AttachmentKind(models.TextChoices):
    IMAGE = "image", "Image (sent to the model)"
    FILE = "file", "File (put in the member's workspace)"


class Attachment(TenantOwned):
    MEMBER_OWNER = "session__user"  # whose session: the member rule (tenancy.member_rule)

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="attachments")
    # Set when the message that carries it is sent; a rewound turn's attachments move
    # to the turn that asks again.
    turn = models.ForeignKey(
        Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="attachments"
    )
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    kind = models.CharField(max_length=8, choices=AttachmentKind.choices)
    name = models.CharField(max_length=255)
    media_type = models.CharField(max_length=100)
    size = models.PositiveIntegerField()
    data = models.BinaryField(blank=True, default=b"", editable=False)  # images only
    workspace_path = models.CharField(max_length=500, blank=True, default="")  # files only
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session_id", "pk"]
        indexes = [models.Index(fields=["turn"], name="attachment_turn")]

    def __str__(self) -> str:
        return f"{self.name} ({self.size:,} bytes)"
