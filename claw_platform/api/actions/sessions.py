"""Session changes the API makes: create (audited), delete, undo and redo."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from agents.actions.conversation import do_create_session, do_redo, do_undo
from agents.actions.runs import active_run
from agents.models import Agent, Session
from claw_platform.api.errors import ApiError
from claw_platform.audit.actions import record_audit_event


@transaction.atomic
def do_open_api_session(
    agent: Agent,
    *,
    user: Any,
    acting_user: Any,
    title: str = "",
    external_key: str | None = None,
    channel: str = "api",
    ip: str | None = None,
    is_group: bool = False,
) -> Session:
    if not agent.enabled:
        raise ApiError(409, "agent_disabled", f"The agent {agent.slug!r} is disabled.")
    session = do_create_session(agent, user=user, channel=channel, external_key=external_key, title=title)
    if is_group:
        # E16: the agent answers only messages that mention it.
        Session._base_manager.filter(pk=session.pk).update(is_group=True)
        session.is_group = True
    record_audit_event(
        action="session.created",
        actor=acting_user,
        obj=session,
        diff={"agent": [None, agent.slug], "channel": [None, channel], "is_group": [None, is_group]},
        ip=ip,
    )
    return session


@transaction.atomic
def do_delete_session(session: Session, *, acting_user: Any, ip: str | None = None) -> None:
    if active_run(session) is not None:
        raise ApiError(409, "session_busy", "The session has a run in progress; cancel it first.")
    record_audit_event(
        action="session.deleted", actor=acting_user, obj=session, diff={"title": [session.title, None]}, ip=ip
    )
    session.delete()


def _check_idle(session: Session) -> None:
    if active_run(session) is not None:
        raise ApiError(409, "session_busy", "The session has a run in progress; wait for it or cancel it.")


@transaction.atomic
def do_undo_turn(session: Session, *, acting_user: Any, ip: str | None = None) -> int:
    _check_idle(session)
    number = do_undo(session)
    if number is None:
        raise ApiError(409, "nothing_to_undo", "There is no turn to undo.")
    record_audit_event(
        action="session.undone", actor=acting_user, obj=session, diff={"turn": [None, number]}, ip=ip
    )
    return number


@transaction.atomic
def do_redo_turn(session: Session, *, acting_user: Any, ip: str | None = None) -> int:
    _check_idle(session)
    number = do_redo(session)
    if number is None:
        raise ApiError(409, "nothing_to_redo", "There is no undone turn to redo.")
    record_audit_event(
        action="session.redone", actor=acting_user, obj=session, diff={"turn": [None, number]}, ip=ip
    )
    return number


@transaction.atomic
def do_seed_history(session: Session, history: list[tuple[str, str]]) -> int:
    """Write a client's earlier messages (OpenAI-compatible requests) as the start of
    a new session's history; system/developer text becomes a user note. Returns the
    number of messages written."""
    from agents.models import Message, Thread

    thread = Thread._base_manager.select_for_update().get(pk=_active_thread_id(session))
    rows = []
    for role, text in history:
        if not text.strip():
            continue
        if role in {"system", "developer"}:
            role, text = "user", f"(Instructions from the client application)\n{text}"
        rows.append((role, text))
    messages = [
        Message(
            tenant_id=session.tenant_id,
            session_id=session.pk,
            thread_id=thread.pk,
            seq=thread.last_seq + i,
            role=role,
            parts=[{"type": "text", "text": text}],
        )
        for i, (role, text) in enumerate(rows, start=1)
    ]
    Message._base_manager.bulk_create(messages)
    Thread._base_manager.filter(pk=thread.pk).update(last_seq=thread.last_seq + len(messages))
    return len(messages)


def _active_thread_id(session: Session) -> Any:
    if session.active_thread_id is None:
        raise ValueError("the session has no active thread")
    return session.active_thread_id
