"""Where a heartbeat's finding goes (C8): the "Heartbeat" session of that user with
the agent (the agent's own file: a session without a user, seen by the tenant's
admins), opened on first use. The finding is a turn -- a "Heartbeat" request and
the finding as the agent's reply, stored as messages of the thread so a reply in
that chat has it in its history -- pushed to every open chat of the session as a
``snapshot`` frame, the form a run's turn takes."""

from __future__ import annotations

import logging
from typing import cast
from uuid import UUID

from django.db import transaction

from agents.engine.types import Message as EngineMessage
from agents.models import Agent, Message, Session, Thread, Turn
from claw_platform.storable import storable_text

logger = logging.getLogger("claw.routines.heartbeat")

SESSION_CHANNEL = "heartbeat"
SESSION_TITLE = "Heartbeat"
NOTICE_PROMPT = "Heartbeat"  # the turn's request line: what woke the agent


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


def post_finding(agent: Agent, user_id: int | None, finding: str) -> Turn:
    """The finding as a turn of the user's Heartbeat session: a "Heartbeat" request
    and the finding as the agent's reply, stored as messages of the thread (so a
    reply in that chat has it in its history)."""
    from agents.actions.conversation import do_finish_turn, do_start_turn

    text = storable_text(finding)
    session = heartbeat_session(agent, user_id)
    with transaction.atomic():
        # A run going in this chat keeps its thread's state (the notice only adds a turn).
        before = Thread._base_manager.select_for_update().get(pk=cast(UUID, session.active_thread_id))
        turn = do_start_turn(session, NOTICE_PROMPT)
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
                    (1, EngineMessage.user(NOTICE_PROMPT)),
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
