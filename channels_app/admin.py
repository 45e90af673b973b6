"""Channels in the admin: configured per tenant and agent by its owners and admins
(bot tokens and signing secrets write-only: "set" / "not set"), the platform
accounts linked to members, and the inbound updates as received (read-only, under
the member rule)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from channels_app.models import (
    Channel,
    ChannelConversation,
    ChannelLink,
    ChannelLinkCode,
    InboundUpdate,
    OutboundReply,
)
from claw_platform.admin.scoped import MemberRuleMixin, TenantScopedAdmin


@admin.register(Channel)
class ChannelAdmin(TenantScopedAdmin):
    list_display = ["name", "kind", "agent", "enabled", "receive_mode", "open_to_everyone"]
    list_filter = ["kind", "enabled"]
    search_fields = ["name"]
    readonly_fields = ["inbound_url", "guest_user", "created_at"]
    fields = [
        "name",
        "agent",
        "kind",
        "enabled",
        "receive_mode",
        "bot_token",
        "signing_secret",
        "app_token",
        "verify_token",
        "account_id",
        "bot_username",
        "callback_url",
        "imap_url",
        "smtp_url",
        "unverified_mail",
        "open_to_everyone",
        "model_override",
        "prompt_override",
        "inbound_url",
        "guest_user",
        "created_at",
    ]

    @admin.display(description="Inbound URL (the platform's webhook)")
    def inbound_url(self, obj: Channel) -> str:
        if obj.pk is None:
            return "(after saving)"
        return format_html("<code>{}</code>", reverse("v1:channel-inbound", args=[obj.public_id]))


@admin.register(ChannelLink)
class ChannelLinkAdmin(TenantScopedAdmin):
    list_display = ["channel", "platform_user_id", "user", "created_at"]
    search_fields = ["platform_user_id"]


@admin.register(ChannelLinkCode)
class ChannelLinkCodeAdmin(MemberRuleMixin, TenantScopedAdmin):
    """Codes members generated to link a chat account (the code itself is never kept)."""

    list_display = ["user", "created_at", "expires_at", "used_at", "link"]
    readonly_fields = ["user", "created_at", "expires_at", "used_at", "link"]

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(OutboundReply)
class OutboundReplyAdmin(MemberRuleMixin, TenantScopedAdmin):
    """Replies on their way (or given up): how many parts arrived, the last error,
    when the sweep tries again."""

    list_display = ["created_at", "channel", "chat_id", "status", "sent_parts", "attempts", "next_attempt_at"]
    list_filter = ["status"]
    readonly_fields = [
        "channel",
        "chat_id",
        "thread_id",
        "parts",
        "draft_message_id",
        "sent_parts",
        "in_flight_since",
        "message_ids",
        "status",
        "attempts",
        "next_attempt_at",
        "claimed_until",
        "last_error",
        "update",
        "run",
        "created_at",
        "sent_at",
    ]

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(InboundUpdate)
class InboundUpdateAdmin(MemberRuleMixin, TenantScopedAdmin):
    list_display = ["received_at", "channel", "platform_id", "sender_id", "status", "detail"]
    list_filter = ["status"]
    readonly_fields = [
        "channel",
        "platform_id",
        "chat_id",
        "sender_id",
        "group_id",
        "text",
        "payload",
        "status",
        "detail",
        "session",
        "run",
        "received_at",
    ]

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ChannelConversation)
class ChannelConversationAdmin(MemberRuleMixin, TenantScopedAdmin):
    list_display = ["channel", "chat_id", "sender_id", "thread_id", "is_group", "session", "created_at"]
    readonly_fields = ["channel", "chat_id", "sender_id", "thread_id", "is_group", "session", "created_at"]

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
