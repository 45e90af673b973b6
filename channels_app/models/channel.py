"""A channel: one bot of one chat platform, configured per tenant and agent (CH1).

Bot tokens and signing secrets are secret fields (encrypted at rest, never shown
back). Where the platform's API lives is an operator setting
(``CLAW_<PLATFORM>_API_URL``), never a tenant's: a bot token travels in the URL.

Who may talk to the bot: senders linked to a member of the tenant
(:class:`ChannelLink`); with ``open_to_everyone`` also anyone else, who then acts as
the channel's guest identity (a per-channel service account with a member's role:
its sessions, memory and budget are its own, the member rule holds for it like for
any member).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from claw_platform.crypto import EncryptedTextField
from claw_platform.tenancy.models import TenantOwned


class ChannelKind(models.TextChoices):
    TELEGRAM = "telegram", "Telegram"
    SLACK = "slack", "Slack"
    WHATSAPP = "whatsapp", "WhatsApp (Cloud API)"
    DISCORD = "discord", "Discord"
    EMAIL = "email", "Email (IMAP in, SMTP out)"
    WEBHOOK = "webhook_channel", "Generic webhook"


class ReceiveMode(models.TextChoices):
    WEBHOOK = "webhook", "Webhook (the platform calls this server)"
    POLLING = (
        "polling",
        "From the workers: Telegram long polling, Slack socket mode, Discord Gateway, IMAP (no public URL)",
    )


class Channel(TenantOwned):
    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="channels")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=32, choices=ChannelKind.choices)
    enabled = models.BooleanField(default=True)
    receive_mode = models.CharField(max_length=16, choices=ReceiveMode.choices, default=ReceiveMode.WEBHOOK)
    bot_token = EncryptedTextField(
        blank=True,
        help_text="Telegram bot token, Slack bot token (xoxb-…), Discord bot token, the mailbox's password; unused by the generic webhook.",
    )
    signing_secret = EncryptedTextField(
        blank=True,
        help_text=(
            "Telegram: the webhook's secret token; Slack: the app's signing secret; "
            "Discord: the application's public key (hex); "
            "generic webhook: the HMAC key of both directions."
        ),
    )
    app_token = EncryptedTextField(
        blank=True, help_text="Slack socket mode: the app-level token (xapp-…) with connections:write."
    )
    verify_token = EncryptedTextField(
        blank=True, help_text="WhatsApp: the verify token of the webhook subscription."
    )
    account_id = models.CharField(
        max_length=100,
        blank=True,
        help_text=(
            "WhatsApp: the phone number id replies are sent from; Discord: the application id; "
            "email: the mailbox's address (also its login)."
        ),
    )
    bot_username = models.CharField(
        max_length=100,
        blank=True,
        help_text=(
            "How the bot is mentioned in groups: Telegram @username, Slack bot user id (U…), "
            "Discord bot user id."
        ),
    )
    callback_url = models.URLField(
        blank=True, max_length=500, help_text="Generic webhook: where replies are POSTed (signed)."
    )
    imap_url = models.CharField(
        max_length=300, blank=True, help_text="Email: where mail is fetched, imaps://host:993."
    )
    smtp_url = models.CharField(
        max_length=300,
        blank=True,
        help_text="Email: where replies are sent, smtps://host:465 or smtp://host:587 (STARTTLS).",
    )
    open_to_everyone = models.BooleanField(
        default=False,
        help_text="Unlinked senders are answered too, as this channel's guest identity.",
    )
    guest_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        editable=False,
    )
    model_override = models.ForeignKey(
        "agents.ModelProfile",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="Empty: the agent's model.",
    )
    unverified_mail = models.CharField(
        max_length=16,
        choices=[
            ("unlinked", "Answer it as from an unlinked sender (never as the linked member)"),
            ("refuse", "Refuse it"),
        ],
        default="unlinked",
        help_text=(
            "Email: mail whose sender is not proven (no aligned DKIM signature, no trusted "
            "dmarc=pass): From can be forged."
        ),
    )
    prompt_override = models.TextField(
        blank=True, max_length=20_000, help_text="Added to the agent's system prompt for this channel."
    )
    poll_offset = models.BigIntegerField(default=0, editable=False)
    # Email: the mailbox's UIDVALIDITY when ``poll_offset`` (a UID) was taken.
    poll_uidvalidity = models.BigIntegerField(default=0, editable=False)
    # Long polling: one holder per channel across all workers, by a lease it renews.
    poll_owner = models.CharField(max_length=200, blank=True, editable=False)
    poll_lease_until = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="channel_unique_name")]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display()})"


class ChannelLink(TenantOwned):
    """A platform account linked to a member: their messages act as that member."""

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="links")
    platform_user_id = models.CharField(max_length=100, help_text="The sender's id on the platform.")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["channel", "platform_user_id"], name="channel_link_unique_sender")
        ]

    def __str__(self) -> str:
        return f"{self.platform_user_id} → {self.user_id}"
