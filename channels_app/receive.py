"""Stored, dispatched, delivered: what happens to verified inbound messages, from a
webhook request or a long-polling worker alike."""

from __future__ import annotations

import contextlib
import logging

from channels_app.actions.inbound import Dispatched, dispatch_update, record_update
from channels_app.adapters import adapter_for
from channels_app.adapters.base import AdapterError, InboundMessage
from channels_app.delivery import answer_command, deliver_run, deliver_text, start_delivery
from channels_app.models import Channel, InboundStatus

logger = logging.getLogger("claw.channels.receive")


def receive_messages(channel: Channel, messages: list[InboundMessage]) -> list[Dispatched]:
    """Store each message (duplicates skipped), dispatch it, start its delivery."""
    done: list[Dispatched] = []
    for message in messages:
        update = record_update(channel, message)
        if update is None:
            logger.info("duplicate update %s on channel %s ignored", message.platform_id, channel.pk)
            continue
        try:
            dispatched = dispatch_update(channel, update, message)
        except Exception:
            logger.exception("update %s on channel %s could not be dispatched", update.pk, channel.pk)
            update.status = InboundStatus.FAILED
            update.detail = "could not be dispatched"
            update.save(update_fields=["status", "detail"])
            continue
        start_followup(channel, dispatched)
        done.append(dispatched)
    return done


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
