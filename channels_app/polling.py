"""Long polling (Telegram ``getUpdates``) and Discord's Gateway from the workers, so
an install behind NAT needs no public URL (CH3).

Every worker process runs :func:`start_channel_pollers`: every ``SCAN_SECONDS`` it
looks for enabled channels set to long polling and claims those whose lease is free
or lapsed (one statement: ``poll_owner`` and ``poll_lease_until``). A claimed channel
is polled in a loop that renews the lease before every request; a worker that dies
lets it lapse (``LEASE_SECONDS``) and another takes over, so no second poller ever
runs for the same bot. Updates go the webhook's way (stored, de-duplicated by the
update id, dispatched); the offset is advanced after they are stored. A Discord
channel's holder keeps one Gateway connection open instead (resumed after a drop),
renewing the lease every ``LEASE_SECONDS / 3`` while connected; an email channel's
holder fetches new mail by UID every ``CLAW_EMAIL_POLL_SECONDS``; a Slack channel's
holder keeps its Socket Mode connection (``adapters/slack/socket_mode.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

import aiohttp
from django.conf import settings
from django.db import connection

from channels_app.adapters import adapter_for
from channels_app.adapters.base import AdapterError, InboundMessage, InboundRequest, parsed_or_skipped
from channels_app.adapters.discord.adapter import DiscordAdapter
from channels_app.adapters.discord.gateway import GatewayConnection, GatewayState, LeaseLost
from channels_app.adapters.email import trust as sender_trust
from channels_app.adapters.email.adapter import EmailAdapter
from channels_app.adapters.email.trust import Verdict
from channels_app.adapters.telegram.adapter import TelegramAdapter
from channels_app.models import Channel, InboundUpdate, ReceiveMode
from claw_platform.background_loop import submit
from claw_platform.db import db_async
from claw_platform.tenancy.context import tenant_context
from claw_platform.tenancy.rls import system_bypass

logger = logging.getLogger("claw.channels.polling")

LEASE_SECONDS = 60
SCAN_SECONDS = 5.0
SWEEP_SECONDS = 15.0
POLL_SECONDS = 25
POLLABLE_KINDS = ("telegram", "discord", "email", "slack")
_pollers: set[asyncio.Future[None]] = set()

_CLAIM_SQL = """
UPDATE channels_app_channel
SET poll_owner = %(owner)s, poll_lease_until = now() + make_interval(secs => %(lease)s)
WHERE id = %(channel)s AND enabled AND receive_mode = %(mode)s
  AND (poll_owner = %(owner)s OR poll_lease_until IS NULL OR poll_lease_until < now())
RETURNING id
"""


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def pollable_channel_ids() -> list[int]:
    return list(
        Channel.objects.unscoped()
        .filter(enabled=True, receive_mode=ReceiveMode.POLLING, kind__in=POLLABLE_KINDS)
        .values_list("pk", flat=True)
    )


def claim_lease(channel_id: int, owner: str, *, lease_seconds: float = LEASE_SECONDS) -> bool:
    """Take or renew the channel's polling lease; False while another holder has it."""
    with connection.cursor() as cursor:
        cursor.execute(
            _CLAIM_SQL,
            {"owner": owner, "lease": lease_seconds, "channel": channel_id, "mode": ReceiveMode.POLLING},
        )
        return cursor.fetchone() is not None


def release_lease(channel_id: int, owner: str) -> None:
    Channel.objects.unscoped().filter(pk=channel_id, poll_owner=owner).update(poll_lease_until=None)


def _store_batch(channel_id: int, updates: list[dict[str, Any]]) -> int:
    """Store and dispatch a batch of updates; the next offset."""
    from channels_app.receive import receive_messages

    channel = Channel.objects.unscoped().select_related("agent").get(pk=channel_id)
    adapter = adapter_for(channel)
    assert isinstance(adapter, TelegramAdapter)
    with tenant_context(channel.tenant_id):
        parsed = (parsed_or_skipped(lambda u=u: adapter.parse_update(u), "telegram", None) for u in updates)  # type: ignore[misc]
        messages = [m for m in parsed if m is not None]
        receive_messages(channel, messages)
    offset = max(int(u.get("update_id", 0)) for u in updates) + 1
    Channel.objects.unscoped().filter(pk=channel_id, poll_offset__lt=offset).update(poll_offset=offset)
    return offset


def _store_mails(
    channel_id: int, mails: list[tuple[int, bytes]], verdicts: dict[int, Verdict], uidvalidity: int
) -> None:
    """Store and dispatch fetched mail (each sender proven or not by ``verdicts``);
    then the highest UID is the new offset (with the UIDVALIDITY it belongs to)."""
    from channels_app.receive import receive_messages

    channel = Channel.objects.unscoped().select_related("agent").get(pk=channel_id)
    adapter = adapter_for(channel)
    assert isinstance(adapter, EmailAdapter)
    with tenant_context(channel.tenant_id):
        messages = []
        for uid, raw in mails:

            def parse(uid: int = uid, raw: bytes = raw) -> InboundMessage | None:
                return adapter.parse_mail(uid, raw, uidvalidity)

            message = parsed_or_skipped(parse, "email", None)
            if message is not None:
                messages.append(sender_trust.apply(message, verdicts[uid]))
        receive_messages(channel, messages)
    _advance_mailbox(channel, max(uid for uid, _raw in mails), uidvalidity)


def _advance_mailbox(channel: Channel, offset: int, uidvalidity: int) -> None:
    rows = Channel.objects.unscoped().filter(pk=channel.pk)
    if uidvalidity and uidvalidity != channel.poll_uidvalidity:
        # Renumbered: the new offset may be below the old one.
        rows.filter(poll_uidvalidity=channel.poll_uidvalidity).update(
            poll_offset=offset, poll_uidvalidity=uidvalidity
        )
    else:
        rows.filter(poll_offset__lt=offset).update(poll_offset=offset)


async def poll_mailbox_once(channel_id: int, owner: str) -> bool:
    """One IMAP round under the lease; False when the lease is lost."""
    if not await db_async(claim_lease)(channel_id, owner):
        return False
    channel = await db_async(Channel.objects.unscoped().get)(pk=channel_id)
    adapter = adapter_for(channel)
    if not isinstance(adapter, EmailAdapter):
        return False
    mails = await adapter.fetch_new(channel.poll_offset, channel.poll_uidvalidity)
    if mails:
        # DKIM's key lookups block: off the loop.
        verdicts = {uid: await asyncio.to_thread(sender_trust.check, raw) for uid, raw in mails}
        await db_async(_store_mails)(channel_id, mails, verdicts, adapter.uidvalidity)
    elif adapter.uidvalidity and adapter.uidvalidity != channel.poll_uidvalidity:
        # The first UIDVALIDITY seen keeps the offset; a new one with an empty mailbox starts at 0.
        await db_async(_advance_mailbox)(
            channel, channel.poll_offset if not channel.poll_uidvalidity else 0, adapter.uidvalidity
        )
    return True


async def _pause(seconds: float, stop: threading.Event) -> None:
    deadline = time.monotonic() + seconds
    while not stop.is_set() and time.monotonic() < deadline:  # noqa: ASYNC110 - a thread's Event
        await asyncio.sleep(min(0.1, seconds))


async def poll_once(channel_id: int, owner: str, *, poll_seconds: int = POLL_SECONDS) -> bool:
    """One ``getUpdates`` round under the lease; False when the lease is lost."""
    if not await db_async(claim_lease)(channel_id, owner):
        return False
    channel = await db_async(Channel.objects.unscoped().get)(pk=channel_id)
    adapter = adapter_for(channel)
    if not isinstance(adapter, TelegramAdapter):
        return False
    updates = await adapter.get_updates(channel.poll_offset, poll_seconds=poll_seconds)
    if updates:
        await db_async(_store_batch)(channel_id, updates)
    return True


def _store_discord_message(
    channel_id: int, data: dict[str, Any], message: InboundMessage | None = None
) -> None:
    """Store and dispatch a ``MESSAGE_CREATE`` (``message``: already parsed, its
    attachments read)."""
    from channels_app.receive import receive_messages

    channel = Channel.objects.unscoped().select_related("agent").get(pk=channel_id)
    adapter = adapter_for(channel)
    assert isinstance(adapter, DiscordAdapter)
    if message is None:
        message = parsed_or_skipped(lambda: adapter.parse_message(data), "discord", None)
    if message is not None:
        with tenant_context(channel.tenant_id):
            receive_messages(channel, [message])


def _fetch_wanted(channel: Channel, message: InboundMessage) -> bool:
    """Whether a message's files are worth reading: addressed to the bot, from a
    linked sender (or on a channel open to everyone), not stored before (a replay)."""
    from channels_app.models import ChannelLink

    if not message.addressed:
        return False
    if InboundUpdate.objects.unscoped().filter(channel=channel, platform_id=message.platform_id).exists():
        return False
    return channel.open_to_everyone or (
        ChannelLink.objects.unscoped().filter(channel=channel, platform_user_id=message.sender_id).exists()
    )


async def _discord_with_files(channel_id: int, data: dict[str, Any]) -> InboundMessage | None:
    """A message with attachments, parsed and its files read before it is stored
    (not for a sender the bot does not answer, nor again for a replayed message)."""
    channel = await db_async(Channel.objects.unscoped().get)(pk=channel_id)
    adapter = adapter_for(channel)
    if not isinstance(adapter, DiscordAdapter):
        return None
    message = parsed_or_skipped(lambda: adapter.parse_message(data), "discord", None)
    if message is None or not await db_async(_fetch_wanted)(channel, message):
        return message
    return await adapter.fetch_files(message)


def _store_slack_payload(channel_id: int, payload: dict[str, Any]) -> None:
    from channels_app.receive import receive_messages

    channel = Channel.objects.unscoped().select_related("agent").get(pk=channel_id)
    adapter = adapter_for(channel)
    with tenant_context(channel.tenant_id):
        receive_messages(
            channel, parsed_or_skipped(lambda: adapter.parse(InboundRequest(b"", {}), payload), "slack", [])
        )


async def hold_slack_socket(channel_id: int, owner: str, stop: threading.Event) -> None:
    """Keep the Slack channel's Socket Mode connection while this worker holds its lease."""
    from channels_app.adapters.slack.socket_mode import hold_socket_mode

    async def on_payload(payload: dict[str, Any]) -> None:
        await db_async(_store_slack_payload)(channel_id, payload)

    async def keep_lease() -> bool:
        return bool(await db_async(claim_lease)(channel_id, owner))

    if not await keep_lease():
        return
    channel = await db_async(Channel.objects.unscoped().get)(pk=channel_id)
    with contextlib.suppress(LeaseLost):
        await hold_socket_mode(
            channel, on_payload=on_payload, keep_lease=keep_lease, stop=stop, lease_every=LEASE_SECONDS / 3
        )


async def hold_gateway(channel_id: int, owner: str, stop: threading.Event) -> None:
    """Keep the Discord channel's Gateway connection open while this worker holds
    its lease, reconnecting (resuming) with backoff after a drop."""
    state = GatewayState()
    backoff = 1.0

    async def on_message(data: dict[str, Any]) -> None:
        message = await _discord_with_files(channel_id, data) if data.get("attachments") else None
        await db_async(_store_discord_message)(channel_id, data, message)

    async def keep_lease() -> bool:
        return bool(await db_async(claim_lease)(channel_id, owner))

    while not stop.is_set():
        if not await keep_lease():
            return
        channel = await db_async(Channel.objects.unscoped().get)(pk=channel_id)
        adapter = adapter_for(channel)
        if not isinstance(adapter, DiscordAdapter) or not channel.enabled:
            return
        connection_ = GatewayConnection(
            adapter,
            state,
            on_message=on_message,
            keep_lease=keep_lease,
            stop=stop,
            lease_every=LEASE_SECONDS / 3,
        )
        try:
            await connection_.run()
            backoff = 1.0
            continue
        except LeaseLost:
            return
        except AdapterError as exc:
            wait = exc.retry_after or (backoff if exc.retryable else 60.0)
            logger.warning("discord gateway of channel %s: %s (next try in %.0fs)", channel_id, exc, wait)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            wait = backoff
            logger.warning("discord gateway of channel %s dropped: %s", channel_id, type(exc).__name__)
        await asyncio.sleep(min(wait, 60.0))
        backoff = min(backoff * 2, 60.0)


async def poll_channel(channel_id: int, owner: str, stop: threading.Event) -> None:
    """Poll one channel while this worker holds its lease."""
    backoff = 1.0
    try:
        kind = await db_async(
            lambda: Channel.objects.unscoped().filter(pk=channel_id).values_list("kind", flat=True).first()
        )()
        if kind == "discord":
            await hold_gateway(channel_id, owner, stop)
            return
        if kind == "slack":
            await hold_slack_socket(channel_id, owner, stop)
            return
        poll = poll_mailbox_once if kind == "email" else poll_once
        while not stop.is_set():
            try:
                if not await poll(channel_id, owner):
                    return
                backoff = 1.0
                if kind == "email":
                    await _pause(float(settings.CLAW_EMAIL_POLL_SECONDS), stop)
            except AdapterError as exc:
                wait = exc.retry_after or (backoff if exc.retryable else 30.0)
                logger.warning("polling channel %s: %s (next try in %.0fs)", channel_id, exc, wait)
                await asyncio.sleep(min(wait, 60.0))
                backoff = min(backoff * 2, 60.0)
            except Channel.DoesNotExist:
                return
            except Exception:
                logger.exception("polling channel %s failed", channel_id)
                await asyncio.sleep(5.0)
    finally:
        await db_async(release_lease)(channel_id, owner)


async def run_pollers(
    stop: threading.Event,
    owner: str,
    *,
    scan_seconds: float = SCAN_SECONDS,
    sweep_seconds: float = SWEEP_SECONDS,
) -> None:
    """Claim and poll channels until ``stop`` is set; every ``sweep_seconds`` also
    sweep the undelivered replies (``channels_app.outbox``) and the updates stored but
    never dispatched (``channels_app.recovery``)."""
    # The pollers find and lease every tenant's polling channels (their tasks inherit
    # this; storing a batch enters the channel's own tenant).
    with system_bypass():
        await _run_pollers(stop, owner, scan_seconds, sweep_seconds)


async def _run_pollers(stop: threading.Event, owner: str, scan_seconds: float, sweep_seconds: float) -> None:
    from channels_app.outbox import sweep_undelivered
    from channels_app.recovery import sweep_unanswered

    running: dict[int, asyncio.Task[None]] = {}
    next_sweep = time.monotonic()
    while not stop.is_set():
        if time.monotonic() >= next_sweep:
            next_sweep = time.monotonic() + sweep_seconds
            try:
                await sweep_undelivered()
            except Exception:
                logger.exception("the undelivered-reply sweep failed")
            try:
                await sweep_unanswered()
            except Exception:
                logger.exception("the unanswered-update sweep failed")
        try:
            for channel_id in await db_async(pollable_channel_ids)():
                task = running.get(channel_id)
                if task is not None and not task.done():
                    continue
                if await db_async(claim_lease)(channel_id, owner):
                    running[channel_id] = asyncio.ensure_future(poll_channel(channel_id, owner, stop))
        except Exception:
            logger.exception("channel poller scan failed")
        await asyncio.sleep(scan_seconds)
    for task in running.values():
        task.cancel()
    # Let each poller's ``finally`` hand its lease back before the loop goes away.
    await asyncio.gather(*running.values(), return_exceptions=True)


def start_channel_pollers(stop: threading.Event) -> None:
    """Run this worker's pollers on the process's background loop."""
    owner = worker_identity()

    async def spawn() -> None:
        _pollers.add(asyncio.ensure_future(run_pollers(stop, owner)))

    submit(spawn())
