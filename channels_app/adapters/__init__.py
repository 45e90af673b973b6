"""Chat-platform adapters (CH1, CH3): one folder per platform, one interface
(:mod:`channels_app.adapters.base`), one error type each that says whether a retry
can help. :func:`adapter_for` builds the adapter of a channel."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from channels_app.adapters.base import ChannelAdapter
    from channels_app.models import Channel


def adapter_for(channel: Channel) -> ChannelAdapter:
    from channels_app.adapters.discord.adapter import DiscordAdapter
    from channels_app.adapters.email.adapter import EmailAdapter
    from channels_app.adapters.slack.adapter import SlackAdapter
    from channels_app.adapters.telegram.adapter import TelegramAdapter
    from channels_app.adapters.webhook.adapter import WebhookAdapter
    from channels_app.adapters.whatsapp.adapter import WhatsAppAdapter

    adapters: dict[str, type[ChannelAdapter]] = {
        "telegram": TelegramAdapter,
        "slack": SlackAdapter,
        "whatsapp": WhatsAppAdapter,
        "discord": DiscordAdapter,
        "email": EmailAdapter,
        "webhook_channel": WebhookAdapter,
    }
    return adapters[channel.kind](channel)
