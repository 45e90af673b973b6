"""Stored, dispatched, delivered: what happens to verified inbound messages, from a
webhook request or a long-polling worker alike.

A message that is one part of several (``group_id``: a Telegram album, whose photos
come as separate updates) is stored like any other, then waits
``CLAW_INBOUND_GROUP_SETTLE_MS``: the wait of the newest part gathers every part
still waiting into one message (:meth:`~channels_app.adapters.base.ChannelAdapter.combine`:
one run, every file, the caption) and dispatches it holding all their rows, so a
wait that lost the race, or the recovery sweep after a crash, finds nothing left to
answer. A part that comes after its group was gathered is answered on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace

from django.conf import settings

from channels_app.actions.inbound import Dispatched, dispatch_group_update, dispatch_update, record_update
from channels_app.adapters import adapter_for
from channels_app.adapters.base import AdapterError, InboundMessage
from channels_app.delivery import answer_command, deliver_run, deliver_text, start_delivery
from channels_app.models import Channel, ChannelLink, InboundStatus, InboundUpdate
from claw_platform.db import db_async
from claw_platform.tenancy.context import tenant_context

logger = logging.getLogger("claw.channels.receive")


def receive_messages(channel: Channel, messages: list[InboundMessage]) -> list[Dispatched]:
    """Store each message (duplicates skipped), dispatch it, start its delivery."""
    done: list[Dispatched] = []
    adapter = adapter_for(channel)
    for message in messages:
        update = record_update(channel, message)
        if update is None:
            logger.info("duplicate update %s on channel %s ignored", message.platform_id, channel.pk)
            continue
        if message.group_id:
            # One part of several: gathered with the others once they stopped coming.
            start_delivery(dispatch_group_when_settled(channel, update))
            continue
        if adapter.offers_files(message) and files_wanted(channel, message):
            # Stored; its files are read, and it is dispatched, after the platform is answered.
            start_delivery(dispatch_with_files(channel, update, message))
            continue
        dispatched = _dispatch(channel, update, message)
        if dispatched is not None:
            done.append(dispatched)
    return done


def _dispatch(
    channel: Channel,
    update: InboundUpdate,
    message: InboundMessage,
    *,
    parts: list[InboundUpdate] | None = None,
) -> Dispatched | None:
    """Dispatch the stored update (``parts``: every stored part of a group, ``update``
    the first) and start what follows."""
    try:
        if parts:
            dispatched = dispatch_group_update(channel, parts, message)
        else:
            dispatched = dispatch_update(channel, update, message)
    except Exception:
        logger.exception("update %s on channel %s could not be dispatched", update.pk, channel.pk)
        ids = [p.pk for p in parts] if parts else [update.pk]
        InboundUpdate.objects.unscoped().filter(pk__in=ids, status=InboundStatus.RECEIVED).update(
            status=InboundStatus.FAILED, detail="could not be dispatched"
        )
        return None
    if dispatched is None:
        logger.info("update %s on channel %s was dispatched elsewhere", update.pk, channel.pk)
        return None
    start_followup(channel, dispatched)
    return dispatched


def files_wanted(channel: Channel, message: InboundMessage) -> bool:
    """Whether a message's files are worth reading: one the bot answers (addressed
    to it, from a linked sender or on a channel open to everyone)."""
    if not message.addressed or message.approval is not None:
        return False
    return channel.open_to_everyone or (
        ChannelLink.objects.unscoped().filter(channel=channel, platform_user_id=message.sender_id).exists()
    )


async def dispatch_with_files(
    channel: Channel, update: InboundUpdate, message: InboundMessage
) -> Dispatched | None:
    """Read a stored message's files (within the caps), then dispatch it."""
    message = await read_files(channel, update, message)
    return await dispatch_in_tenant(channel, update, message)


async def read_files(channel: Channel, update: InboundUpdate, message: InboundMessage) -> InboundMessage:
    """The message with its files read, or named as not read (the words still go through)."""
    try:
        return await adapter_for(channel).fetch_files(message)
    except Exception:
        logger.exception("files of update %s on channel %s could not be read", update.pk, channel.pk)
        return replace(message, files=(), refused_files=("The attachments could not be fetched.",))


async def dispatch_in_tenant(
    channel: Channel, update: InboundUpdate, message: InboundMessage
) -> Dispatched | None:
    """:func:`_dispatch` from the background loop, in the channel's tenant."""

    def dispatch() -> Dispatched | None:
        with tenant_context(channel.tenant_id):
            return _dispatch(channel, update, message)

    return await db_async(dispatch)()


async def dispatch_group_when_settled(channel: Channel, update: InboundUpdate) -> Dispatched | None:
    """After the settle window, the group of ``update`` dispatched as one message when
    ``update`` is its newest part still waiting (an older part's wait leaves it to the
    newer one's)."""
    await asyncio.sleep(int(settings.CLAW_INBOUND_GROUP_SETTLE_MS) / 1000)
    return await dispatch_group(channel, update, newest_only=True)


def _waiting_parts(channel: Channel, update: InboundUpdate) -> list[InboundUpdate]:
    with tenant_context(channel.tenant_id):
        return list(
            InboundUpdate.objects.unscoped()
            .filter(
                channel_id=channel.pk,
                chat_id=update.chat_id,
                group_id=update.group_id,
                status=InboundStatus.RECEIVED,
            )
            .order_by("pk")
        )


def _restored(channel: Channel, part: InboundUpdate) -> InboundMessage | None:
    try:
        return adapter_for(channel).restore(part.payload)
    except Exception:  # a stored payload the adapter no longer reads
        logger.exception("update %s on channel %s could not be restored", part.pk, channel.pk)
        return None


def _fail_parts(channel: Channel, parts: list[InboundUpdate]) -> None:
    with tenant_context(channel.tenant_id):
        InboundUpdate.objects.unscoped().filter(
            pk__in=[p.pk for p in parts], status=InboundStatus.RECEIVED
        ).update(status=InboundStatus.FAILED, detail="could not be restored")


def _files_wanted_in_tenant(channel: Channel, message: InboundMessage) -> bool:
    with tenant_context(channel.tenant_id):
        return files_wanted(channel, message)


async def dispatch_group(channel: Channel, update: InboundUpdate, *, newest_only: bool) -> Dispatched | None:
    """Every part of ``update``'s group still waiting, as one message: its files read,
    then dispatched holding every part's row (None: gathered elsewhere, or, with
    ``newest_only``, a newer part waits and gathers it)."""
    parts = await db_async(_waiting_parts)(channel, update)
    if not any(p.pk == update.pk for p in parts):
        return None  # gathered already
    if newest_only and parts[-1].pk != update.pk:
        return None  # a newer part came: its own wait gathers the group
    adapter = adapter_for(channel)
    messages = [m for m in (_restored(channel, p) for p in parts) if m is not None]
    if not messages:
        logger.warning("group %s on channel %s could not be restored", update.group_id[:40], channel.pk)
        await db_async(_fail_parts)(channel, parts)
        return None
    message = adapter.combine(messages) if len(messages) > 1 else messages[0]
    if adapter.offers_files(message) and await db_async(_files_wanted_in_tenant)(channel, message):
        message = await read_files(channel, parts[0], message)

    def dispatch() -> Dispatched | None:
        with tenant_context(channel.tenant_id):
            return _dispatch(channel, parts[0], message, parts=parts)

    return await db_async(dispatch)()


def start_followup(channel: Channel, dispatched: Dispatched) -> None:
    update_id = dispatched.update.pk
    if dispatched.button is not None:
        start_delivery(_acknowledge(channel, dispatched.button, dispatched.notice))
    elif dispatched.notice:
        start_delivery(_notice(channel.pk, dispatched, update_id))
    if dispatched.command:
        start_delivery(
            answer_command(
                channel.pk, dispatched.target, dispatched.session_id, dispatched.command, update_id=update_id
            )
        )
    if dispatched.run_id is not None:
        start_delivery(
            deliver_run(
                channel.pk,
                dispatched.target,
                dispatched.run_id,
                dispatched.session_id,
                after=dispatched.after_seq,
                update_id=update_id,
            )
        )


async def _notice(channel_id: int, dispatched: Dispatched, update_id: int) -> None:
    with contextlib.suppress(AdapterError):
        await deliver_text(channel_id, dispatched.target, dispatched.notice, update_id=update_id)


async def _acknowledge(channel: Channel, button: InboundMessage, text: str) -> None:
    try:
        await adapter_for(channel).acknowledge_button(button, text)
    except AdapterError as exc:
        logger.info("button acknowledgement failed: %s", exc)
