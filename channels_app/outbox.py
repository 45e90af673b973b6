"""Replies are never lost (the undelivered-reply sweep).

A final reply is written as an :class:`OutboundReply` (its parts, split to the
platform's limit) before its first part is sent, and advanced part by part as the
platform accepts them. The live delivery holds the row by a claim
(``LIVE_CLAIM``); when the platform stays busy (a retryable error after the
delivery's own retries) the row waits for ``next_attempt_at`` (backoff doubling from
``FIRST_RETRY`` up to ``MAX_BACKOFF``) and a worker's sweep (:func:`sweep_undelivered`,
run by ``channels_app.polling.run_pollers``) claims it, ``FOR UPDATE SKIP LOCKED``
with a lease so no two workers send it, and sends the parts not yet delivered. A
process that died mid-delivery leaves its row to the sweep once the claim lapses. An
error no retry can help (a 4xx) marks it failed; so do ``MAX_ATTEMPTS`` rounds.

No part twice after a crash: before a part goes out the row is marked in flight
(``in_flight_since``, committed), after it the platform's message id is recorded and
the mark cleared, in one commit. A row found in flight was cut off between the two
(the process died, the connection dropped after the platform took the part); it is
sent again with the platform's own idempotency where there is one
(:meth:`ChannelAdapter.send_keyed` / :meth:`~ChannelAdapter.find_sent`, keyed by
:func:`part_key`):

- Discord: ``nonce`` with ``enforce_nonce``: Discord answers the message it already
  made instead of a second one (it remembers a nonce for a few minutes: a sweep
  after a longer outage can still repeat the part);
- Slack: ``chat.postMessage`` has no idempotency key; each part carries message
  metadata with its key, and ``conversations.history`` (``conversations.replies`` in
  a thread) is asked for it before sending again (a bot without the history scope
  cannot look: then the part is sent again);
- email: the part's Message-ID is the same on every try, so a repeat is one message
  to the recipient's client (which threads and de-duplicates by it);
- the generic webhook: the same ``message_id`` on every try (the receiver
  de-duplicates by it);
- Telegram and WhatsApp have nothing: a part the platform accepted just before the
  cut-off is sent once more (at most one duplicate per crash). The window is the
  time between the platform's answer and our commit of it (one UPDATE).

The same holds within one delivery: a retry after a dropped connection asks first.

A part may be an approval prompt (``{"approval": {approval_id, tool, summary}}``):
sent with the platform's buttons and keyed like a text part, skipped once the call
is decided.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from channels_app.adapters import adapter_for
from channels_app.adapters.base import AdapterError, ApprovalPrompt, ChannelAdapter, Target
from channels_app.models import Channel, OutboundReply, OutboundStatus
from claw_platform.db import db_async

logger = logging.getLogger("claw.channels.outbox")

LIVE_CLAIM = timedelta(minutes=5)
SWEEP_CLAIM = timedelta(minutes=2)
FIRST_RETRY = timedelta(seconds=30)
MAX_BACKOFF = timedelta(hours=1)
MAX_ATTEMPTS = 10

_CLAIM_SQL = """
UPDATE channels_app_outboundreply SET claimed_until = now() + make_interval(secs => %(lease)s)
WHERE id IN (
    SELECT id FROM channels_app_outboundreply
    WHERE status = 'pending' AND next_attempt_at <= now()
      AND (claimed_until IS NULL OR claimed_until < now())
    ORDER BY next_attempt_at LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING id
"""


def create_outbound(
    channel: Channel,
    target: Target,
    parts: list[str] | list[str | dict[str, Any]],
    *,
    draft_message_id: str = "",
    update_id: int | None = None,
    run_id: int | None = None,
) -> int:
    now = timezone.now()
    return int(
        OutboundReply.objects.unscoped()
        .create(
            tenant_id=channel.tenant_id,
            channel=channel,
            chat_id=target.chat_id[:200],
            thread_id=target.thread_id[:200],
            parts=parts,
            draft_message_id=draft_message_id[:200],
            next_attempt_at=now,
            claimed_until=now + LIVE_CLAIM,
            update_id=update_id,
            run_id=run_id,
        )
        .pk
    )


def claim_due(limit: int = 20) -> list[int]:
    """Claim up to ``limit`` replies due for another try (none that another holds)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_CLAIM_SQL, {"lease": SWEEP_CLAIM.total_seconds(), "limit": limit})
        return [int(row[0]) for row in cursor.fetchall()]


def _load(row_id: int) -> OutboundReply:
    return OutboundReply.objects.unscoped().select_related("channel", "channel__agent").get(pk=row_id)


def part_key(row_id: int, index: int) -> str:
    """The key of a reply's part, the same on every try (at most 25 characters:
    Discord's nonce)."""
    return f"claw-r{row_id}-p{index}"


def _mark_in_flight(row_id: int) -> None:
    OutboundReply.objects.unscoped().filter(pk=row_id).update(in_flight_since=timezone.now())


def _advance(row_id: int, index: int, message_id: str) -> None:
    with transaction.atomic():
        row = OutboundReply.objects.unscoped().select_for_update().get(pk=row_id)
        row.sent_parts = index + 1
        row.message_ids = [*row.message_ids, message_id]
        row.in_flight_since = None
        fields = ["sent_parts", "message_ids", "in_flight_since"]
        if row.sent_parts >= len(row.parts):
            row.status, row.sent_at, row.claimed_until = OutboundStatus.SENT, timezone.now(), None
            fields += ["status", "sent_at", "claimed_until"]
        row.save(update_fields=fields)


def _postpone(row_id: int, error: str, retryable: bool) -> bool:
    """Record the failure; True when the sweep will try again."""
    row = OutboundReply.objects.unscoped().get(pk=row_id)
    row.attempts += 1
    row.last_error = error[:500]
    row.claimed_until = None
    again = retryable and row.attempts < MAX_ATTEMPTS
    if again:
        row.next_attempt_at = timezone.now() + min(FIRST_RETRY * 2 ** (row.attempts - 1), MAX_BACKOFF)
    else:
        row.status = OutboundStatus.FAILED
    row.save(update_fields=["attempts", "last_error", "claimed_until", "next_attempt_at", "status"])
    return again


async def _send_part(
    adapter: ChannelAdapter, target: Target, text: str, key: str, *, since: float, cut_off: bool
) -> str:
    """One part, sent once: when an earlier try may have reached the platform (the
    row was found in flight, or this delivery's previous try failed), the platform is
    asked first whether it holds the part already."""
    from channels_app.delivery import with_retries

    tries = 0

    async def attempt() -> str:
        nonlocal tries
        tries += 1
        if cut_off or tries > 1:
            found = await adapter.find_sent(target, key, since)
            if found:
                logger.info("part %s was delivered before the cut-off: not sent again", key)
                return found
        return await adapter.send_keyed(target, text, key)

    return await with_retries(attempt)


def _still_pending(approval_id: str) -> bool:
    from agents.models import ApprovalRequest, ApprovalStatus

    return ApprovalRequest._base_manager.filter(pk=approval_id, status=ApprovalStatus.PENDING).exists()


async def _send_approval(
    row_id: int,
    adapter: ChannelAdapter,
    target: Target,
    approval: dict[str, str],
    key: str,
    *,
    since: float,
    cut_off: bool,
) -> str:
    """An approval prompt (buttons where the platform has them), keyed like a part:
    not sent once the call is decided (a sweep may come late)."""
    from channels_app.delivery import with_retries

    prompt = ApprovalPrompt(str(approval["approval_id"]), str(approval["tool"]), str(approval["summary"]))
    if not await db_async(_still_pending)(prompt.approval_id):
        return ""
    if not cut_off:
        await db_async(_mark_in_flight)(row_id)
    tries = 0

    async def attempt() -> str:
        nonlocal tries
        tries += 1
        if cut_off or tries > 1:
            found = await adapter.find_sent(target, key, since)
            if found:
                return found
        return await adapter.send_approval(target, prompt, key)

    return await with_retries(attempt)


async def send_outbound(row_id: int, adapter: ChannelAdapter | None = None) -> list[str]:
    """Send the parts of the reply not delivered yet; the platform's message ids.
    Raises the adapter's error (after recording it on the row)."""
    from channels_app.delivery import with_retries

    row = await db_async(_load)(row_id)
    adapter = adapter or adapter_for(row.channel)
    target = Target(row.chat_id, row.thread_id)
    ids = list(row.message_ids)
    cut_off = row.in_flight_since is not None
    since = row.created_at.timestamp() - 60  # the platform's clock may differ a little
    try:
        for index in range(row.sent_parts, len(row.parts)):
            part = str(row.parts[index])
            approval = row.parts[index].get("approval") if isinstance(row.parts[index], dict) else None
            if approval is not None:
                message_id = await _send_approval(
                    row_id, adapter, target, approval, part_key(row_id, index), since=since, cut_off=cut_off
                )
            elif index == 0 and row.draft_message_id:
                # An edit is the same however often it is made.
                draft = row.draft_message_id
                await with_retries(lambda part=part, draft=draft: adapter.edit_text(target, draft, part))  # type: ignore[misc]
                message_id = draft
            else:
                if not cut_off:
                    await db_async(_mark_in_flight)(row_id)
                message_id = await _send_part(
                    adapter, target, part, part_key(row_id, index), since=since, cut_off=cut_off
                )
            cut_off = False
            await db_async(_advance)(row_id, index, message_id)
            ids.append(message_id)
    except AdapterError as exc:
        again = await db_async(_postpone)(row_id, str(exc), exc.retryable)
        exc.sweep_retries = again  # type: ignore[attr-defined]
        raise
    return ids


async def sweep_undelivered(limit: int = 20) -> int:
    """One sweep: claim the replies due and send what is left of each; how many
    were delivered in full."""
    delivered = 0
    for row_id in await db_async(claim_due)(limit):
        try:
            await send_outbound(row_id)
            delivered += 1
        except AdapterError as exc:
            logger.info("undelivered reply %s still not delivered: %s", row_id, exc)
        except Exception:
            logger.exception("undelivered reply %s could not be sent", row_id)
            await db_async(_postpone)(row_id, "internal error", True)
    return delivered
