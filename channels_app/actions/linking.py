"""Linking a chat-platform account to a member by a one-time code (as device pairing
does): :func:`do_issue_link_code` in the web chat (a member who may act, the code
shown once, valid ``LINK_CODE_TTL``, an earlier unused code withdrawn), then
``/link CODE`` sent to a bot of the same tenant from the platform account:
:func:`do_link_sender` links that sender on that channel to the code's member. A
sender that sent ``MAX_FAILURES`` wrong codes within ``LOCKOUT`` is not heard for a
while (a guessed code is worth a member's identity)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from channels_app.models import Channel, ChannelLink, ChannelLinkCode, InboundUpdate
from claw_platform.api.secrets import new_pairing_code, normalise_pairing_code, sha256_hex
from claw_platform.audit.actions import record_audit_event
from claw_platform.tenancy.lookup import member_role
from claw_platform.tenancy.member_rule import ACTING_ROLES

LINK_CODE_TTL = timedelta(minutes=10)
MAX_FAILURES = 5
LOCKOUT = timedelta(minutes=15)
REFUSED_DETAIL = "link code refused"


class LinkRefused(Exception):
    pass


def do_issue_link_code(tenant_id: int, user: Any) -> str:
    """A new code for ``user`` (shown once; only its hash is kept)."""
    if member_role(tenant_id, user.pk) not in ACTING_ROLES:
        raise LinkRefused("Viewers do not talk to the team's agents, so they link no chat accounts.")
    code = new_pairing_code()
    with transaction.atomic():
        ChannelLinkCode.objects.unscoped().filter(
            tenant_id=tenant_id, user=user, used_at__isnull=True
        ).delete()
        row = ChannelLinkCode.objects.unscoped().create(
            tenant_id=tenant_id,
            user=user,
            code_hash=sha256_hex(normalise_pairing_code(code)),
            expires_at=timezone.now() + LINK_CODE_TTL,
        )
        record_audit_event(action="channel.link_code_issued", tenant_id=tenant_id, obj=row, actor=user)
    return code


def locked_out(channel: Channel, sender_id: str) -> bool:
    since = timezone.now() - LOCKOUT
    failures = InboundUpdate.objects.unscoped().filter(
        channel=channel, sender_id=sender_id[:200], detail=REFUSED_DETAIL, received_at__gte=since
    )
    return failures.count() >= MAX_FAILURES


def do_link_sender(channel: Channel, sender_id: str, code: str) -> ChannelLink:
    """Link ``sender_id`` on ``channel`` to the member whose valid code this is;
    raises :class:`LinkRefused` otherwise. Call inside a transaction."""
    if locked_out(channel, sender_id):
        raise LinkRefused("Too many wrong codes; try again later.")
    row = (
        ChannelLinkCode.objects.unscoped()
        .select_for_update()
        .select_related("user")
        .filter(
            tenant_id=channel.tenant_id,
            code_hash=sha256_hex(normalise_pairing_code(code)),
            used_at__isnull=True,
            expires_at__gt=timezone.now(),
        )
        .first()
    )
    if (
        row is None
        or not row.user.is_active
        or member_role(channel.tenant_id, row.user_id) not in ACTING_ROLES
    ):
        raise LinkRefused("That code is not valid (or it expired).")
    link, _created = ChannelLink.objects.unscoped().update_or_create(
        channel=channel,
        platform_user_id=sender_id[:100],
        defaults={"tenant_id": channel.tenant_id, "user": row.user},
    )
    ChannelLinkCode.objects.unscoped().filter(pk=row.pk).update(used_at=timezone.now(), link=link)
    record_audit_event(action="channel.linked", tenant_id=channel.tenant_id, obj=link, actor=row.user)
    return link


def do_unlink(tenant_id: int, user: Any, link_id: int) -> bool:
    """Remove one of ``user``'s own links; False when there is no such link of theirs."""
    link = ChannelLink.objects.unscoped().filter(tenant_id=tenant_id, user=user, pk=link_id).first()
    if link is None:
        return False
    record_audit_event(action="channel.unlinked", tenant_id=tenant_id, obj=link, actor=user)
    link.delete()
    return True


def my_links(tenant_id: int, user: Any) -> list[ChannelLink]:
    return list(
        ChannelLink.objects.unscoped()
        .select_related("channel")
        .filter(tenant_id=tenant_id, user=user)
        .order_by("channel__name", "platform_user_id")
    )
