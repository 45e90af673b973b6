"""Slack's Socket Mode, so a Slack channel behind NAT needs no public URL: slack-sdk's
``SocketModeClient`` (aiohttp) opens ``apps.connections.open`` with the app-level
token (``xapp-…``) and keeps the WebSocket (pings, reconnects on ``disconnect``).

It runs inside a worker under the channel's lease (``channels_app.polling``). Every
``events_api`` and ``interactive`` envelope is stored and dispatched exactly as the
Events API request would be (same payloads, same de-duplication) and only then
acknowledged by its ``envelope_id``: an envelope that could not be stored is not
acknowledged, and Slack delivers it again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from channels_app.adapters.discord.gateway import LeaseLost
from channels_app.models import Channel

logger = logging.getLogger("claw.channels.slack")

HANDLED_TYPES = frozenset({"events_api", "interactive"})
TICK_SECONDS = 0.25


async def hold_socket_mode(
    channel: Channel,
    *,
    on_payload: Callable[[dict[str, Any]], Awaitable[None]],
    keep_lease: Callable[[], Awaitable[bool]],
    stop: threading.Event,
    lease_every: float = 20.0,
    ping_interval: float = 5.0,
) -> None:
    """Hold the channel's Socket Mode connection until ``stop`` (or raise
    :class:`LeaseLost`)."""
    web = AsyncWebClient(token=channel.bot_token, base_url=f"{settings.CLAW_SLACK_API_URL.rstrip('/')}/")
    client = SocketModeClient(
        app_token=channel.app_token, web_client=web, ping_interval=ping_interval, logger=logger
    )

    async def on_request(client: SocketModeClient, request: SocketModeRequest) -> None:
        if request.type in HANDLED_TYPES and isinstance(request.payload, dict):
            await on_payload(request.payload)  # raises: not acknowledged, Slack sends it again
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))

    client.socket_mode_request_listeners.append(on_request)  # type: ignore[arg-type]
    # connect() retries by itself until it succeeds: the lease is kept meanwhile.
    connecting = asyncio.ensure_future(client.connect())
    next_lease = time.monotonic() + lease_every
    try:
        while not stop.is_set():
            if time.monotonic() >= next_lease:
                if not await keep_lease():
                    raise LeaseLost()
                next_lease = time.monotonic() + lease_every
            await asyncio.sleep(TICK_SECONDS)
    finally:
        connecting.cancel()
        await client.close()
