"""No inbound message lost after a crash (issue 29): the unanswered-update sweep.

An update is stored (status ``received``) and committed before the platform is told
"got it", then dispatched; a process that dies in between (or while the message's
files are read) leaves it received, and the user would never get an answer. A
worker's sweep (:func:`sweep_unanswered`, run with the undelivered-reply sweep by
``channels_app.polling.run_pollers``) takes each update still received
``CLAW_INBOUND_RECOVER_AFTER_SECONDS`` after it came (longer than the files' 60 s
deadline) and dispatches it again through the same path as the first time: the
adapter restores the message from the stored payload
(:meth:`~channels_app.adapters.base.ChannelAdapter.restore`), its files are read
again when they are wanted, and :func:`~channels_app.receive._dispatch` decides it
(a reply, ``/link``, a slash command, an approval button behave as the first time).

The parts of a group (a Telegram album) are gathered and dispatched as one message
here too (:func:`~channels_app.receive.dispatch_group`).

Exactly once: every dispatch, the first and the sweep's, holds the row ``FOR UPDATE
SKIP LOCKED`` while it is still received
(:func:`~channels_app.actions.inbound.claim_received`), in the transaction that
moves it on; whoever comes second finds it locked or no longer received and does
nothing.

An email is stored with its text, the sender verdict reached when it came (kept as
it was decided, never checked against DNS again) and where its attachments are (UID,
UIDVALIDITY, a hash of the mail): they are read again from the mailbox. Where the
stored payload cannot give the message back whole (a row stored before that; a Slack
or Discord button press) the update is marked failed and a linked, proven sender is
asked to send it again (never an unproven mail sender: the From may be someone
else's). An update still received after ``CLAW_INBOUND_GIVE_UP_HOURS`` is marked
failed, not answered late.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from channels_app.adapters import adapter_for
from channels_app.adapters.base import InboundMessage, Target
from channels_app.models import ChannelLink, InboundStatus, InboundUpdate
from claw_platform.db import db_async
from claw_platform.tenancy.rls import system_bypass

logger = logging.getLogger("claw.channels.recovery")

RESEND_NOTICE = (
    "Sorry: your message could not be answered (the service restarted while it was "
    "handled). Please send it again."
)
GIVEN_UP_DETAIL = "not dispatched in time (the service restarted): given up, not answered late"
NOT_RESTORABLE_DETAIL = "not dispatched (the service restarted); the sender was asked to resend"


def _due(limit: int) -> list[int]:
    """Give up the updates too old to answer; the ids of those due for another try."""
    now = timezone.now()
    too_old = now - timedelta(hours=settings.CLAW_INBOUND_GIVE_UP_HOURS)
    due = now - timedelta(seconds=settings.CLAW_INBOUND_RECOVER_AFTER_SECONDS)
    with system_bypass():  # the sweep looks at every tenant's waiting updates
        received = InboundUpdate.objects.unscoped().filter(status=InboundStatus.RECEIVED)
        given_up = received.filter(received_at__lt=too_old).update(
            status=InboundStatus.FAILED, detail=GIVEN_UP_DETAIL
        )
        if given_up:
            logger.warning("%s inbound updates were never dispatched: marked failed", given_up)
        return list(
            received.filter(received_at__lte=due, received_at__gte=too_old)
            .order_by("received_at")
            .values_list("pk", flat=True)[:limit]
        )


def _load(update_id: int) -> InboundUpdate | None:
    with system_bypass():  # the sweep's update may be any tenant's
        return (
            InboundUpdate.objects.unscoped()
            .select_related("channel", "channel__agent")
            .filter(pk=update_id, status=InboundStatus.RECEIVED)
            .first()
        )


def _files_wanted(update: InboundUpdate, message: InboundMessage) -> bool:
    from channels_app.receive import files_wanted

    with system_bypass():  # the sender's link on the update's channel, any tenant
        return files_wanted(update.channel, message)


def _give_up_unrestorable(update: InboundUpdate) -> bool:
    """Mark the update failed (unless another dispatch took it); True when its sender
    is to be asked to resend: a linked member, proven by the platform."""
    from channels_app.adapters.email.trust import UNVERIFIED_PREFIX

    with system_bypass():  # the sweep's update may be any tenant's
        taken = (
            InboundUpdate.objects.unscoped()
            .filter(pk=update.pk, status=InboundStatus.RECEIVED)
            .update(status=InboundStatus.FAILED, detail=NOT_RESTORABLE_DETAIL)
        )
        if not taken or not update.sender_id or update.sender_id.startswith(UNVERIFIED_PREFIX):
            return False
        return (
            ChannelLink.objects.unscoped()
            .filter(channel_id=update.channel_id, platform_user_id=update.sender_id)
            .exists()
        )


async def recover_update(update_id: int) -> bool:
    """Dispatch one waiting update again; True when this call dispatched it."""
    from channels_app.delivery import deliver_text
    from channels_app.receive import dispatch_in_tenant, read_files

    update = await db_async(_load)(update_id)
    if update is None:
        return False  # dispatched meanwhile
    channel = update.channel
    if update.group_id:
        # A part of an album: every part still waiting goes as one message.
        from channels_app.receive import dispatch_group

        gathered = await dispatch_group(channel, update, newest_only=False)
        if gathered is not None:
            logger.info("group of update %s on channel %s recovered", update.pk, channel.pk)
        return gathered is not None
    adapter = adapter_for(channel)
    try:
        message = adapter.restore(update.payload)
    except Exception:  # a stored payload the adapter no longer reads
        logger.exception("update %s on channel %s could not be restored", update.pk, channel.pk)
        message = None
    if message is not None and message.platform_id[:200] != update.platform_id:
        message = None
    if message is None:
        if await db_async(_give_up_unrestorable)(update):
            await deliver_text(channel.pk, Target(update.chat_id), RESEND_NOTICE, update_id=update.pk)
        logger.warning("update %s on channel %s could not be restored", update.pk, channel.pk)
        return False
    if adapter.offers_files(message) and await db_async(_files_wanted)(update, message):
        message = await read_files(channel, update, message)
    dispatched = await dispatch_in_tenant(channel, update, message)
    if dispatched is not None:
        logger.info("update %s on channel %s recovered and dispatched", update.pk, channel.pk)
    return dispatched is not None


async def sweep_unanswered(limit: int = 20) -> int:
    """One sweep: updates too old are given up, those due are dispatched again; how
    many this sweep dispatched."""
    recovered = 0
    for update_id in await db_async(_due)(limit):
        try:
            recovered += await recover_update(update_id)
        except Exception:
            logger.exception("inbound update %s could not be recovered", update_id)
    return recovered
