"""Sessions, threads, turns, undo/redo (S1, S3, S5). Each action is one transaction."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from agents.models import (
    Agent,
    Checkpoint,
    Message,
    MessageState,
    Session,
    Thread,
    ThreadState,
    Turn,
    TurnState,
)

MAX_CHECKPOINTS = 20


def _active_thread(session: Session) -> Any:
    if session.active_thread_id is None:
        raise ValueError("the session has no active thread")
    return session.active_thread_id


@transaction.atomic
def do_create_session(
    agent: Agent,
    *,
    user: Any = None,
    channel: str = "web",
    external_key: str | None = None,
    parent: Session | None = None,
    title: str = "",
) -> Session:
    session = Session._base_manager.create(
        tenant_id=agent.tenant_id,
        agent=agent,
        user=user if getattr(user, "pk", None) else None,
        channel=channel,
        external_key=external_key,
        parent=parent,
        depth=(parent.depth + 1) if parent else 0,
        title=title[:200],
    )
    thread = Thread._base_manager.create(tenant_id=agent.tenant_id, session=session)
    session.active_thread = thread
    session.save(update_fields=["active_thread"])
    return session


def session_for_external_key(
    agent: Agent, external_key: str, *, user: Any = None, channel: str = "web"
) -> Session:
    """The session an outside conversation (channel, sender, thread) maps to (S5)."""
    existing = Session._base_manager.filter(tenant_id=agent.tenant_id, external_key=external_key).first()
    if existing is not None:
        return existing
    return do_create_session(agent, user=user, channel=channel, external_key=external_key)


@transaction.atomic
def do_new_thread(session: Session) -> Thread:
    thread = Thread._base_manager.create(tenant_id=session.tenant_id, session=session)
    Session._base_manager.filter(pk=session.pk).update(active_thread=thread)
    session.active_thread = thread
    return thread


@transaction.atomic
def do_switch_thread(session: Session, thread_id: Any) -> Thread | None:
    thread = Thread._base_manager.filter(session_id=session.pk, pk=thread_id).first()
    if thread is not None:
        Session._base_manager.filter(pk=session.pk).update(active_thread=thread)
        session.active_thread = thread
    return thread


@transaction.atomic
def do_start_turn(session: Session, text: str) -> Turn:
    """A new turn on the session's active thread, after an undo checkpoint (S3).

    A new turn ends the redo stack: turns undone before it stay stored (marked
    undone), but can no longer be redone.
    """
    thread = Thread._base_manager.select_for_update().get(pk=_active_thread(session))
    Checkpoint._base_manager.filter(thread=thread, undone=True).delete()
    number = (Checkpoint._base_manager.filter(thread=thread).aggregate(n=Max("number"))["n"] or 0) + 1
    Checkpoint._base_manager.create(
        tenant_id=thread.tenant_id, thread=thread, number=number, message_seq=thread.last_seq
    )
    stale = list(
        Checkpoint._base_manager.filter(thread=thread)
        .order_by("-number")
        .values_list("pk", flat=True)[MAX_CHECKPOINTS:]
    )
    if stale:
        Checkpoint._base_manager.filter(pk__in=stale).delete()
    turn_number = (Turn._base_manager.filter(thread=thread).aggregate(n=Max("number"))["n"] or 0) + 1
    turn = Turn._base_manager.create(
        tenant_id=thread.tenant_id,
        thread=thread,
        session_id=session.pk,
        number=turn_number,
        state=TurnState.RUNNING,
        user_text=text,
        started_at=timezone.now(),
    )
    Thread._base_manager.filter(pk=thread.pk).update(state=ThreadState.PROCESSING)
    Session._base_manager.filter(pk=session.pk).update(last_activity_at=timezone.now())
    return turn


_TURN_END = {
    "completed": (TurnState.COMPLETE, ThreadState.IDLE),
    "awaiting_approval": (TurnState.RUNNING, ThreadState.AWAITING_APPROVAL),
    "cancelled": (TurnState.FAILED, ThreadState.INTERRUPTED),
    "timed_out": (TurnState.FAILED, ThreadState.INTERRUPTED),
    "failed": (TurnState.FAILED, ThreadState.IDLE),
}


@transaction.atomic
def do_finish_turn(turn: Turn, *, status: str, text: str = "", error: str = "") -> None:
    turn_state, thread_state = _TURN_END.get(status, (TurnState.FAILED, ThreadState.IDLE))
    Turn._base_manager.filter(pk=turn.pk).update(
        state=turn_state,
        response_text=text,
        error=error[:5000],
        finished_at=timezone.now() if turn_state != TurnState.RUNNING else None,
    )
    Thread._base_manager.filter(pk=turn.thread_id).update(state=thread_state)


@transaction.atomic
def do_undo(session: Session) -> int | None:
    """Hide the newest turn's messages; returns the checkpoint number or None."""
    thread_id: Any = session.active_thread_id
    Thread._base_manager.select_for_update().filter(pk=thread_id).first()
    checkpoint = (
        Checkpoint._base_manager.filter(thread_id=thread_id, undone=False).order_by("-number").first()
    )
    if checkpoint is None:
        return None
    Message._base_manager.filter(
        thread_id=thread_id, seq__gt=checkpoint.message_seq, state=MessageState.ACTIVE
    ).update(state=MessageState.UNDONE, undo_checkpoint=checkpoint)
    checkpoint.undone = True
    checkpoint.save(update_fields=["undone"])
    return checkpoint.number


@transaction.atomic
def do_redo(session: Session) -> int | None:
    """Bring back the most recently undone turn; returns the checkpoint number or None."""
    thread_id: Any = session.active_thread_id
    Thread._base_manager.select_for_update().filter(pk=thread_id).first()
    checkpoint = Checkpoint._base_manager.filter(thread_id=thread_id, undone=True).order_by("number").first()
    if checkpoint is None:
        return None
    Message._base_manager.filter(thread_id=thread_id, undo_checkpoint=checkpoint).update(
        state=MessageState.ACTIVE, undo_checkpoint=None
    )
    checkpoint.undone = False
    checkpoint.save(update_fields=["undone"])
    return checkpoint.number


@transaction.atomic
def do_clear_thread(session: Session) -> Thread:
    """/clear: start the session over on a fresh thread (the old one stays stored)."""
    return do_new_thread(session)


def do_set_title(session: Session, title: str) -> None:
    Session._base_manager.filter(pk=session.pk).update(title=title.strip()[:200])
