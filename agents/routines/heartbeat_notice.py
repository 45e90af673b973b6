"""Where a heartbeat's finding goes (C8): the "Heartbeat" session of that user with
the agent, opened on first use. A finding of the agent's own HEARTBEAT.md is told
to the tenant's owners and admins (:func:`shared_file_audience`), each in their own
Heartbeat session with the agent: the people who keep the agent's checklist. The
finding is a turn -- a "Heartbeat" request and the finding as the agent's reply,
stored as messages of the thread so a reply in that chat has it in its history --
pushed to every open chat of the session as a ``snapshot`` frame, the form a run's
turn takes."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import cast
from uuid import UUID

from django.db import connection, transaction

from agents.engine.types import Message as EngineMessage
from agents.models import Agent, HeartbeatNotify, Message, Session, Thread, Turn
from claw_platform.storable import storable_text
from claw_platform.tenancy.context import tenant_context

logger = logging.getLogger("claw.routines.heartbeat")

SESSION_CHANNEL = "heartbeat"
SESSION_TITLE = "Heartbeat"
NOTICE_PROMPT = "Heartbeat"  # the turn's request line: what woke the agent
# The request line of a finding of the agent's own checklist, told to its admins.
SHARED_NOTICE_PROMPT = "Heartbeat (the agent's HEARTBEAT.md)"


def shared_file_audience(tenant_id: int) -> list[int]:
    """Who is told a finding of the agent's own HEARTBEAT.md: the tenant's owners and
    admins (they see every agent and session of the tenant and edit the agent's
    files); members are told only what their own copy finds."""
    from claw_platform.tenancy.models import CONFIG_EDITOR_ROLES, Membership

    return list(
        Membership._base_manager.filter(
            tenant_id=tenant_id, role__in=CONFIG_EDITOR_ROLES, user__is_active=True
        )
        .order_by("user_id")
        .values_list("user_id", flat=True)
    )


def heartbeat_session(agent: Agent, user_id: int | None) -> Session:
    """The "Heartbeat" session of ``user_id`` with the agent, opened on first use."""
    from agents.actions.conversation import session_for_external_key

    key = f"heartbeat:{user_id if user_id is not None else 'agent'}"
    user = None
    if user_id is not None:
        from django.contrib.auth import get_user_model

        user = get_user_model()._default_manager.filter(pk=user_id).first()
    session = session_for_external_key(agent, key, user=user, channel=SESSION_CHANNEL)
    if not session.title:
        session.title = SESSION_TITLE
        Session._base_manager.filter(pk=session.pk).update(title=SESSION_TITLE)
    return session


def post_finding(agent: Agent, user_id: int | None, finding: str, *, prompt: str = NOTICE_PROMPT) -> Turn:
    """The finding as a turn of the user's Heartbeat session: a ``prompt`` request
    ("Heartbeat") and the finding as the agent's reply, stored as messages of the
    thread (so a reply in that chat has it in its history)."""
    from agents.actions.conversation import do_finish_turn, do_start_turn

    text = storable_text(finding)
    session = heartbeat_session(agent, user_id)
    with transaction.atomic():
        # A run going in this chat keeps its thread's state (the notice only adds a turn).
        before = Thread._base_manager.select_for_update().get(pk=cast(UUID, session.active_thread_id))
        turn = do_start_turn(session, prompt)
        thread = Thread._base_manager.get(pk=turn.thread_id)
        base = thread.last_seq
        Thread._base_manager.filter(pk=thread.pk).update(last_seq=base + 2)
        Message._base_manager.bulk_create(
            [
                Message(
                    tenant_id=session.tenant_id,
                    session_id=session.pk,
                    thread_id=thread.pk,
                    turn_id=turn.pk,
                    seq=base + offset,
                    role=message.role,
                    parts=message.to_dict()["parts"],
                )
                for offset, message in (
                    (1, EngineMessage.user(prompt)),
                    (2, EngineMessage.assistant(text)),
                )
            ]
        )
        do_finish_turn(turn, status="completed", text=text)
        Thread._base_manager.filter(pk=thread.pk).update(state=before.state)
    push_turn(session.pk, turn.pk)
    return turn


def push_turn(session_id: object, turn_id: int) -> None:
    """Show the new turn in every open chat of the session (a ``snapshot`` frame, as
    a run's); a layer that fails only costs the live view (the page reads it on load)."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from channels_app.relay import RUN_EVENT_MESSAGE, session_group
    from channels_app.transcript import turn_state

    layer = get_channel_layer()
    if layer is None:
        return
    try:
        state = turn_state(Turn._base_manager.get(pk=turn_id))
        # No run: the frame carries none (the chat draws the turn from its state).
        frame = {"type": "snapshot", "payload": {"text": "", "status": "completed", "turn": state}}
        async_to_sync(layer.group_send)(
            session_group(session_id), {"type": RUN_EVENT_MESSAGE, "event": frame}
        )
    except Exception:
        logger.exception("heartbeat: the live view of session %s was not updated", session_id)


# Where a finding is told outside the chat (the agent's ``heartbeat_notify``): each
# chat-platform account the user linked (``/link CODE``) on an enabled channel of
# the agent. The user's direct chat with the bot is the one they last wrote from;
# before that, on the platforms where an account's id is also its direct chat
# (Telegram, WhatsApp, email, Slack's DM by user id, the generic webhook), that id.
# ``linked_email`` adds the user's e-mail address, sent by the agent's e-mail channel.
DIRECT_BY_ACCOUNT_ID = frozenset({"telegram", "whatsapp", "email", "slack", "webhook_channel"})
NOTICE_PREFIX = "Heartbeat ({agent}): "
DELIVERY_NOTE_CHARS = 500


@dataclass(frozen=True)
class LinkedTarget:
    channel_id: int
    label: str  # the channel's name, for the run's delivery note
    chat_id: str  # "" when no direct chat is known (``problem`` says why)
    thread_id: str = ""
    problem: str = ""


def linked_targets(agent_id: int, user_id: int, *, with_email: bool = False) -> list[LinkedTarget]:
    """Each linked account of ``user_id`` on the agent's enabled channels, with its
    direct chat (one per channel and chat); ``with_email``: also the user's e-mail
    address on the agent's first enabled e-mail channel. None once the user left
    the tenant."""
    from channels_app.models import ChannelConversation, ChannelLink
    from claw_platform.tenancy.lookup import member_role

    agent = Agent._base_manager.filter(pk=agent_id).only("tenant_id").first()
    if agent is None or not member_role(agent.tenant_id, user_id):
        return []
    links = list(
        ChannelLink._base_manager.filter(user_id=user_id, channel__agent_id=agent_id, channel__enabled=True)
        .select_related("channel")
        .order_by("channel_id", "id")
    )
    found: list[LinkedTarget] = []
    seen: set[tuple[int, str]] = set()
    for link in links:
        channel = link.channel
        direct = (
            ChannelConversation._base_manager.filter(
                channel_id=channel.pk, sender_id=link.platform_user_id, is_group=False
            )
            .order_by("-created_at", "-id")
            .first()
        )
        if direct is not None:
            target = LinkedTarget(channel.pk, channel.name, direct.chat_id, direct.thread_id)
        elif channel.kind in DIRECT_BY_ACCOUNT_ID:
            target = LinkedTarget(channel.pk, channel.name, link.platform_user_id)
        else:
            target = LinkedTarget(
                channel.pk,
                channel.name,
                "",
                problem="no direct chat with the user yet (they have not written)",
            )
        if (target.channel_id, target.chat_id) in seen:
            continue
        seen.add((target.channel_id, target.chat_id))
        found.append(target)
    if with_email:
        found += _email_target(agent_id, user_id, seen)
    return found


def _email_target(agent_id: int, user_id: int, seen: set[tuple[int, str]]) -> list[LinkedTarget]:
    from django.contrib.auth import get_user_model

    from channels_app.models import Channel

    address = (
        get_user_model()._default_manager.filter(pk=user_id).values_list("email", flat=True).first() or ""
    ).strip()
    channel = (
        Channel._base_manager.filter(agent_id=agent_id, kind="email", enabled=True).order_by("id").first()
    )
    if not address or channel is None:
        why = "the user has no e-mail address" if not address else "the agent has no e-mail channel"
        return [LinkedTarget(channel.pk if channel else 0, "e-mail", "", problem=why)]
    if any(chat.lower() == address.lower() for channel_id, chat in seen if channel_id == channel.pk):
        return []  # linked there already
    return [LinkedTarget(channel.pk, channel.name, address)]


def send_to_linked(agent: Agent, user_id: int, finding: str, *, with_email: bool = False) -> list[str]:
    """Send the finding to each linked account of the user (and their e-mail address
    with ``with_email``); one note per account ("Telegram bot: sent", or why not). A
    platform's failure is a note, never raised."""
    from channels_app.adapters.base import AdapterError, Target
    from channels_app.delivery import deliver_to_channel

    text = NOTICE_PREFIX.format(agent=agent.name) + storable_text(finding)
    notes: list[str] = []
    for target in linked_targets(agent.pk, user_id, with_email=with_email):
        if target.problem:
            notes.append(f"{target.label}: skipped: {target.problem}")
            continue
        try:
            deliver_to_channel(target.channel_id, Target(target.chat_id, target.thread_id), text)
        except AdapterError as exc:
            notes.append(f"{target.label}: failed: {str(exc)[:200]}")
        except Exception as exc:  # a timeout, a dropped connection: recorded, never raised
            logger.warning("heartbeat notice to channel %s failed: %r", target.channel_id, exc)
            notes.append(f"{target.label}: failed: {type(exc).__name__}")
        else:
            notes.append(f"{target.label}: sent")
    return notes


def deliver_notices(row_id: int, agent: Agent, notices: list[tuple[int | None, str]]) -> None:
    """After the heartbeat's run settled: tell each finding's user on their linked
    accounts (when the agent says so), in a thread of its own like a routine's
    delivery (inline with ``CLAW_ROUTINE_DELIVERY_INLINE``); the notes land on the
    run's ``delivery``."""
    from django.conf import settings

    wanted = [(user_id, finding) for user_id, finding in notices if user_id is not None]
    if not wanted:
        return
    tenant_id, agent_id = agent.tenant_id, agent.pk

    def work() -> None:
        from agents.models import RoutineRun

        with tenant_context(tenant_id):  # a thread starts without the caller's tenant
            current = Agent._base_manager.filter(pk=agent_id).first()
            if current is None or current.heartbeat_notify == HeartbeatNotify.SESSION:
                return
            with_email = current.heartbeat_notify == HeartbeatNotify.LINKED_EMAIL
            notes: list[str] = []
            for user_id, finding in wanted:
                assert user_id is not None
                try:
                    sent = send_to_linked(current, user_id, finding, with_email=with_email)
                except Exception:  # a bug here costs the notice, never the heartbeat
                    logger.exception("heartbeat run %s: the notice to user %s failed", row_id, user_id)
                    sent = [f"user {user_id}: failed: internal error"]
                notes += [f"user {user_id} on {note}" if len(wanted) > 1 else note for note in sent]
            if notes:
                RoutineRun._base_manager.filter(pk=row_id).update(
                    delivery="; ".join(notes)[:DELIVERY_NOTE_CHARS]
                )

    if settings.CLAW_ROUTINE_DELIVERY_INLINE:
        work()
        return

    def in_thread() -> None:
        try:
            work()
        finally:
            connection.close()

    threading.Thread(target=in_thread, name="claw-heartbeat-notice", daemon=True).start()
