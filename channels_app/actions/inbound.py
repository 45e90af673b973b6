"""An inbound update, from stored row to started run (CH1, S5, E16, T13).

Order: the update is written (unique per channel and platform id: a platform's retry
is a duplicate and starts nothing) and committed before the platform is answered;
then, in its own transaction, it is dispatched:

- who: a sender linked to a member acts as that member (a sender the platform
  does not prove, such as mail without an aligned DKIM signature, never does: it
  is refused or unlinked per the channel); an unlinked sender is
  refused unless the channel is open to everyone, then acts as the channel's guest
  identity (a per-channel service account, a plain member of the tenant: the member
  rule, memory and budgets treat it like any member);
- groups: a message that neither mentions nor replies to the bot is stored and
  ignored; private chats are always answered;
- the conversation (channel, chat, sender, thread) maps to one session, opened with
  the channel's model override; group sessions leave personal memory out;
- an approval button decides that approval (only the member whose session it is, or
  the tenant's owners and admins); a reply such as ``yes`` / ``/approve`` decides the
  session's waiting call (``do_send_message``); ``/stop`` stops the run; other slash
  commands are answered inline.
"""

from __future__ import annotations

import logging
import re
import secrets
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction

from agents.actions.attachments import do_attach_to_turn
from agents.actions.conversation import external_session_key, session_for_external_key
from agents.actions.runs import do_decide_approval, do_send_message
from agents.engine.commands import parse_slash_command
from agents.models import ApprovalRequest, ApprovalStatus, Run, Session
from channels_app.actions.linking import REFUSED_DETAIL, LinkRefused, do_link_sender
from channels_app.adapters.base import InboundMessage, Target
from channels_app.attachments import refusal_notice, store_message_files
from channels_app.models import Channel, ChannelConversation, ChannelLink, InboundStatus, InboundUpdate
from claw_platform.audit.actions import record_audit_event
from claw_platform.tenancy.actions import do_add_member
from claw_platform.tenancy.lookup import member_role
from claw_platform.tenancy.models import Role, Tenant

logger = logging.getLogger("claw.channels.inbound")

LINK_COMMAND = re.compile(r"^/link(?:@\S+)?\s+([A-Za-z0-9-]{6,40})\s*$", re.IGNORECASE)
UNLINKED_NOTICE = (
    "This bot answers linked members only. If you are a member of the team, open the web "
    "chat's Connected accounts page, choose “Link a chat account”, and send the code here "
    "in a private chat as /link CODE."
)
UNSUPPORTED_NOTICE = "Sorry, I cannot take {what} here. Send words, pictures, files or a voice note instead."
REPLY_COMMANDS = {"/approve": "approve", "/yes": "yes", "/deny": "deny", "/no": "no"}


@dataclass
class Dispatched:
    """What the delivery side does next: follow ``run_id`` (None: nothing runs), send
    ``notice`` (a short text: refused, decided, an inline command's answer), or run
    ``command`` in ``session_id`` and send its answer."""

    update: InboundUpdate
    target: Target
    run_id: int | None = None
    after_seq: int = 0
    session_id: Any = None
    notice: str = ""
    command: str = ""
    button: InboundMessage | None = None


def record_update(channel: Channel, message: InboundMessage) -> InboundUpdate | None:
    """The update, stored and committed; None when it was stored before (a retry)."""
    text = message.text
    if LINK_COMMAND.match(text.strip()):
        text = "/link [code]"  # a code is a credential: never stored
    try:
        with transaction.atomic():
            return InboundUpdate.objects.unscoped().create(
                tenant_id=channel.tenant_id,
                channel=channel,
                platform_id=message.platform_id[:200],
                chat_id=message.chat_id[:200],
                sender_id=message.sender_id[:200],
                text=text,
                group_id=message.group_id[:200],
                payload=dict(message.raw),
            )
    except IntegrityError:
        return None


def without_code(value: Any, code: str) -> Any:
    """``value`` (a stored payload) with every occurrence of a link code masked."""
    if isinstance(value, str):
        return value.replace(code, "[code]")
    if isinstance(value, dict):
        return {key: without_code(item, code) for key, item in value.items()}
    if isinstance(value, list):
        return [without_code(item, code) for item in value]
    return value


def _finish(update: InboundUpdate, status: str, detail: str = "", **fields: Any) -> None:
    update.status = status
    update.detail = detail[:500]
    for name, value in fields.items():
        setattr(update, name, value)
    update.save(update_fields=["status", "detail", *fields])


def sender_identity(channel: Channel, sender_id: str) -> Any:
    """The member the sender acts as, the guest identity of an open channel, or None."""
    link = (
        ChannelLink.objects.unscoped()
        .select_related("user")
        .filter(channel=channel, platform_user_id=sender_id)
        .first()
    )
    if link is not None and link.user.is_active and member_role(channel.tenant_id, link.user_id):
        return link.user
    if channel.open_to_everyone:
        return guest_identity(channel)
    return None


def guest_identity(channel: Channel) -> Any:
    """The channel's guest account, made on first use: a member of the tenant that
    cannot sign in (no usable password), named for the channel."""
    if channel.guest_user_id is not None:
        user = get_user_model().objects.filter(pk=channel.guest_user_id).first()
        if user is not None and member_role(channel.tenant_id, user.pk):
            return user
    with transaction.atomic():
        locked = Channel.objects.unscoped().select_for_update().get(pk=channel.pk)
        if locked.guest_user_id is not None and member_role(channel.tenant_id, locked.guest_user_id):
            channel.guest_user_id = locked.guest_user_id
            return get_user_model().objects.get(pk=locked.guest_user_id)
        user = get_user_model().objects.create_user(
            username=f"channel-guest-{channel.public_id.hex[:12]}-{secrets.token_hex(3)}",
            first_name=f"{channel.name} guest"[:150],
        )
        user.set_unusable_password()
        user.save(update_fields=["password"])
        do_add_member(Tenant.objects.get(pk=channel.tenant_id), user, Role.MEMBER)
        Channel.objects.unscoped().filter(pk=channel.pk).update(guest_user=user)
        channel.guest_user_id = user.pk
        record_audit_event(action="channel.guest_created", tenant_id=channel.tenant_id, obj=channel)
        return user


def conversation_session(channel: Channel, message: InboundMessage, user: Any) -> Session:
    """The session of (channel, chat, sender, thread), opened on first use."""
    key = external_session_key(f"ch{channel.pk}:{message.chat_id}", message.sender_id, message.thread_id)
    session = session_for_external_key(channel.agent, key, user=user, channel=channel.kind)
    _conversation, created = ChannelConversation.objects.unscoped().get_or_create(
        session=session,
        defaults={
            "tenant_id": channel.tenant_id,
            "channel": channel,
            "chat_id": message.chat_id[:200],
            "sender_id": message.sender_id[:200],
            "thread_id": message.thread_id[:200],
            "is_group": not message.is_private,
        },
    )
    if created:
        fields: dict[str, Any] = {
            "title": f"{channel.name}: {message.sender_name or message.sender_id}"[:200]
        }
        if channel.model_override_id:
            fields["model_override_id"] = channel.model_override_id
        Session._base_manager.filter(pk=session.pk).update(**fields)
        for name, value in fields.items():
            setattr(session, name, value)
    return session


def claim_received(update: InboundUpdate) -> bool:
    """Hold the stored update for its dispatch while it is still waiting (in the
    dispatch's transaction): a slow first dispatch and the recovery sweep
    (``channels_app.recovery``) never both dispatch one update. The other one skips
    the locked row, or finds it no longer received once the holder committed; a
    holder that dies rolls back and leaves the update to the sweep."""
    held = (
        InboundUpdate.objects.unscoped()
        .select_for_update(skip_locked=True)
        .filter(pk=update.pk, status=InboundStatus.RECEIVED)
        .values_list("pk", flat=True)
    )
    return bool(list(held[:1]))


def dispatch_update(channel: Channel, update: InboundUpdate, message: InboundMessage) -> Dispatched | None:
    """Decide what the stored update does; one transaction. None: it is dispatched
    already (or being dispatched) elsewhere."""
    target = Target(message.chat_id, message.thread_id)
    with transaction.atomic():
        if not claim_received(update):
            return None
        linking = LINK_COMMAND.match(message.text.strip())
        if linking is not None:
            # The code stays in the stored payload only until the update is dispatched
            # (a crash before that leaves it to the recovery sweep), whatever comes of it.
            update.payload = without_code(update.payload, linking.group(1))
            InboundUpdate.objects.unscoped().filter(pk=update.pk).update(payload=update.payload)
        if message.unverified:
            # A forgeable sender: refused, or an unlinked sender (never the member). No
            # notice unless it is answered: the From may be someone else's.
            if channel.unverified_mail == "refuse" or linking is not None:
                _finish(update, InboundStatus.REFUSED, f"sender not proven: {message.unverified}")
                return Dispatched(update, target)
        elif linking is not None and message.approval is None:
            return _link_sender(channel, update, message, target, linking.group(1))
        user = sender_identity(channel, message.sender_id)
        if user is None and message.unverified:
            _finish(update, InboundStatus.REFUSED, f"sender not proven: {message.unverified}")
            return Dispatched(update, target)
        if user is None:
            _finish(update, InboundStatus.REFUSED, "sender not linked")
            notice = (
                f"{UNLINKED_NOTICE} (Your id here: {message.sender_id[:100]}.)" if message.addressed else ""
            )
            return Dispatched(update, target, notice=notice)
        if message.approval is not None:
            return _decide_by_button(channel, update, message, user, target)
        if not message.addressed:
            _finish(update, InboundStatus.IGNORED, "group message not addressed to the bot")
            return Dispatched(update, target)
        if message.unsupported:
            _finish(update, InboundStatus.REFUSED, f"not supported: {message.unsupported}")
            return Dispatched(update, target, notice=UNSUPPORTED_NOTICE.format(what=message.unsupported))
        session = conversation_session(channel, message, user)
        text = message.text.strip()
        text = REPLY_COMMANDS.get(text.lower(), text)
        command = parse_slash_command(text)
        if command is not None and command.name != "stop":
            _finish(update, InboundStatus.ANSWERED, f"/{command.name}", session=session)
            return Dispatched(update, target, session_id=session.pk, command=text)
        if message.files or message.refused_files:
            return _send_with_files(update, message, target, session, user, text)
        run = do_send_message(session, message.text if command else text, acting_user=user)
        if run is None:
            _finish(update, InboundStatus.ANSWERED, "nothing to stop", session=session)
            return Dispatched(update, target, session_id=session.pk, notice="Nothing is running.")
        decided = run.turn.user_text != text
        _finish(
            update, InboundStatus.DECIDED if decided else InboundStatus.ANSWERED, "", session=session, run=run
        )
        return Dispatched(update, target, run_id=run.pk, session_id=session.pk, after_seq=_event_seq(run.pk))


def dispatch_group_update(
    channel: Channel, parts: list[InboundUpdate], message: InboundMessage
) -> Dispatched | None:
    """Dispatch the stored parts of a group (an album) as ``message``, one
    transaction: every part's row held, the first carrying the dispatch and the
    others marked as it went. None: some part is dispatched (or being dispatched)
    elsewhere."""
    ids = [p.pk for p in parts]
    with transaction.atomic():
        held = list(
            InboundUpdate.objects.unscoped()
            .select_for_update(skip_locked=True)
            .filter(pk__in=ids, status=InboundStatus.RECEIVED)
            .values_list("pk", flat=True)
        )
        if len(held) != len(ids):
            return None
        dispatched = dispatch_update(channel, parts[0], message)
        if dispatched is None:
            return None
        lead = dispatched.update
        InboundUpdate.objects.unscoped().filter(pk__in=ids[1:]).update(
            status=lead.status,
            detail=f"one message with update {lead.platform_id}"[:500],
            session_id=lead.session_id,
            run_id=lead.run_id,
        )
        return dispatched


def _send_with_files(
    update: InboundUpdate, message: InboundMessage, target: Target, session: Session, user: Any, text: str
) -> Dispatched:
    """A message with attachments: the files kept and tied to its turn (images to a
    vision model with it), those left out named to the sender and to the model."""
    stored = store_message_files(session, user, message.files, message.refused_files)
    notice = refusal_notice(stored.refused)
    if not stored.ids and not text:
        _finish(update, InboundStatus.REFUSED, "attachments refused", session=session)
        return Dispatched(update, target, session_id=session.pk, notice=notice)
    run = do_send_message(session, (text or "(see the attachments)") + stored.model_note, acting_user=user)
    if run is None:  # a message with files is never a /stop
        _finish(update, InboundStatus.FAILED, "not sent", session=session)
        return Dispatched(update, target, session_id=session.pk, notice=notice)
    do_attach_to_turn(run.turn, stored.ids)
    _finish(update, InboundStatus.ANSWERED, f"{len(stored.ids)} attached"[:500], session=session, run=run)
    return Dispatched(
        update, target, run_id=run.pk, session_id=session.pk, after_seq=_event_seq(run.pk), notice=notice
    )


def _link_sender(
    channel: Channel, update: InboundUpdate, message: InboundMessage, target: Target, code: str
) -> Dispatched:
    if not message.is_private:
        _finish(update, InboundStatus.REFUSED, "link code in a group")
        return Dispatched(update, target, notice="Send /link in a private chat with the bot, not here.")
    try:
        link = do_link_sender(channel, message.sender_id, code)
    except LinkRefused as exc:
        _finish(update, InboundStatus.REFUSED, REFUSED_DETAIL)
        return Dispatched(update, target, notice=str(exc))
    _finish(update, InboundStatus.ANSWERED, "linked")
    name = link.user.get_full_name() or link.user.get_username()
    return Dispatched(update, target, notice=f"Linked: you talk to this bot as {name} now.")


def _decide_by_button(
    channel: Channel, update: InboundUpdate, message: InboundMessage, user: Any, target: Target
) -> Dispatched:
    approval_id, approved = message.approval or ("", False)
    approval = (
        ApprovalRequest.objects.unscoped()
        .select_related("run")
        .filter(
            tenant_id=channel.tenant_id,
            pk=int(approval_id) if approval_id.isdigit() else -1,
            run__session__channel=channel.kind,
            run__session__agent_id=channel.agent_id,
        )
        .first()
    )
    if approval is None:
        _finish(update, InboundStatus.FAILED, "no such approval")
        return Dispatched(update, target, notice="This approval is gone.", button=message)
    if approval.status != ApprovalStatus.PENDING:
        _finish(update, InboundStatus.DECIDED, f"already {approval.status}")
        return Dispatched(update, target, notice=f"Already {approval.status}.", button=message)
    try:
        with transaction.atomic():
            do_decide_approval(approval, approved, acting_user=user, reason=f"{channel.kind} button")
    except PermissionDenied:
        _finish(update, InboundStatus.REFUSED, "not allowed to decide this approval")
        return Dispatched(
            update,
            target,
            notice="Only the member who asked, or the team's owners and admins, can decide this.",
            button=message,
        )
    except ValueError as exc:
        _finish(update, InboundStatus.DECIDED, str(exc))
        return Dispatched(update, target, notice=str(exc), button=message)
    _finish(
        update,
        InboundStatus.DECIDED,
        "approved" if approved else "denied",
        session_id=approval.run.session_id,
        run=approval.run,
    )
    return Dispatched(
        update,
        target,
        run_id=approval.run_id,
        after_seq=_event_seq(approval.run_id),
        session_id=approval.run.session_id,
        notice="Approved." if approved else "Denied.",
        button=message,
    )


def _event_seq(run_id: int) -> int:
    """The run's last stored event: its delivery follows what comes after."""
    return int(Run._base_manager.filter(pk=run_id).values_list("event_seq", flat=True).first() or 0)
