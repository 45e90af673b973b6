"""Sessions, threads, turns, undo/redo (S1, S3, S5). Each action is one transaction."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
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
from claw_platform.prepared import prepared_cursor

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
    person = user if getattr(user, "pk", None) else None
    if person is not None and parent is None:
        from agents.actions.user_files import is_first_chat, seed_user_files

        if is_first_chat(agent, person):
            seed_user_files(agent, person)  # G3: once, on the user's first chat
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


def external_session_key(channel: str, sender: str, thread: str = "") -> str:
    """The key of an outside conversation (S5): ``channel:sender[:thread]``. Parts are
    escaped so ``a:b`` + ``c`` never meets ``a`` + ``b:c``."""
    parts = [channel, sender] + ([thread] if thread else [])
    return ":".join(p.replace("%", "%25").replace(":", "%3A") for p in parts)[:300]


def session_for_external_key(
    agent: Agent, external_key: str, *, user: Any = None, channel: str = "web"
) -> Session:
    """The live session an outside conversation (channel, sender, thread) maps to for
    this agent (S5), opened on first use. Two first messages racing open one session:
    the loser of the unique-key race takes the winner's."""
    live = Session._base_manager.filter(
        tenant_id=agent.tenant_id, agent_id=agent.pk, external_key=external_key, archived_at__isnull=True
    )
    existing = live.first()
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            return do_create_session(agent, user=user, channel=channel, external_key=external_key)
    except IntegrityError:
        return live.get()


def prune_idle_sessions(
    *, idle_days: int, empty_hours: int = 24, undo_delete_seconds: int = 3600
) -> dict[str, int]:
    """Scheduled (S5): archive outside conversations idle for ``idle_days`` (their key
    opens a fresh session next time; nothing is deleted), delete web sessions that
    never got a message and are older than ``empty_hours`` (opened, then abandoned),
    and remove for good the chats their members deleted over ``undo_delete_seconds`` ago."""
    now = timezone.now()
    _, purged = Session._base_manager.filter(
        deleted_at__lt=now - timedelta(seconds=undo_delete_seconds)
    ).delete()
    archived = Session._base_manager.filter(
        external_key__isnull=False,
        archived_at__isnull=True,
        last_activity_at__lt=now - timedelta(days=idle_days),
    ).update(archived_at=now)
    _, deleted = (
        Session._base_manager.filter(
            channel="web",
            external_key__isnull=True,
            parent__isnull=True,
            created_at__lt=now - timedelta(hours=empty_hours),
        )
        .filter(~Exists(Turn._base_manager.filter(session_id=OuterRef("pk"))))
        .delete()
    )
    return {
        "archived": archived,
        "deleted_empty": deleted.get("agents.Session", 0),
        "purged_deleted": purged.get("agents.Session", 0),
    }


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


# One statement (atomic on its own) because it runs before every LLM request: bump the
# thread's turn counter (its row lock orders turns), drop checkpoints that are undone
# (the redo stack ends with a new turn) or beyond the newest 20, record this turn's
# checkpoint and open the turn.
_START_TURN_SQL = """
WITH t AS (
    UPDATE agents_thread SET turn_count = turn_count + 1, state = %(processing)s, updated_at = now()
    WHERE id = %(thread)s
    RETURNING turn_count, last_seq
), gone AS (
    DELETE FROM agents_checkpoint c USING t
    WHERE c.thread_id = %(thread)s AND (c.undone OR c.number <= t.turn_count - %(keep)s)
    RETURNING c.id
), unlink AS (
    UPDATE agents_message SET undo_checkpoint_id = NULL WHERE undo_checkpoint_id IN (SELECT id FROM gone)
), checkpoint AS (
    INSERT INTO agents_checkpoint (tenant_id, thread_id, number, message_seq, undone, created_at)
    SELECT %(tenant)s, %(thread)s, t.turn_count, t.last_seq, false, now() FROM t
), activity AS (
    UPDATE agents_session SET last_activity_at = now() WHERE id = %(session)s
)
INSERT INTO agents_turn (tenant_id, thread_id, session_id, number, state, user_text, response_text, error,
                         partial_text, started_at, created_at)
SELECT %(tenant)s, %(thread)s, %(session)s, t.turn_count, %(running)s, %(text)s, '', '', '', now(), now()
FROM t
RETURNING id, number, started_at, created_at
"""


def do_start_turn(session: Session, text: str) -> Turn:
    """A new turn on the session's active thread, after an undo checkpoint (S3).

    A new turn ends the redo stack: turns undone before it stay stored (marked
    undone) but can no longer be redone. Only the newest 20 checkpoints are kept.
    """
    thread_id = _active_thread(session)
    with prepared_cursor() as cursor:
        cursor.execute(
            _START_TURN_SQL,
            {
                "thread": thread_id,
                "session": session.pk,
                "tenant": session.tenant_id,
                "text": text,
                "keep": MAX_CHECKPOINTS,
                "processing": ThreadState.PROCESSING,
                "running": TurnState.RUNNING,
            },
        )
        row = cursor.fetchone()
    if row is None:
        raise ValueError("the session's thread no longer exists")
    turn_id, number, started_at, created_at = row
    return Turn(
        pk=turn_id,
        tenant_id=session.tenant_id,
        thread_id=thread_id,
        session_id=session.pk,
        number=number,
        state=TurnState.RUNNING,
        user_text=text,
        started_at=started_at,
        created_at=created_at,
    )


_TURN_END = {
    "completed": (TurnState.COMPLETE, ThreadState.IDLE),
    "awaiting_approval": (TurnState.RUNNING, ThreadState.AWAITING_APPROVAL),
    "cancelled": (TurnState.FAILED, ThreadState.INTERRUPTED),
    "timed_out": (TurnState.FAILED, ThreadState.INTERRUPTED),
    "failed": (TurnState.FAILED, ThreadState.IDLE),
}


def do_finish_turn(turn: Turn, *, status: str, text: str = "", error: str = "") -> None:
    """Close the turn with ``status``: its state and reply, its thread's state, and
    the session's usage totals, in one statement (atomic on its own)."""
    turn_state, thread_state = _TURN_END.get(status, (TurnState.FAILED, ThreadState.IDLE))
    with prepared_cursor() as cursor:
        cursor.execute(
            _FINISH_TURN_SQL,
            {
                "turn": turn.pk,
                "state": turn_state,
                "text": text,
                "error": error[:5000],
                "finished_at": timezone.now() if turn_state != TurnState.RUNNING else None,
                "thread": turn.thread_id,
                "thread_state": thread_state,
                "session": turn.session_id,
            },
        )


def roll_up_session_usage(session_id: Any) -> None:
    """Add the session's not-yet-counted usage records to its totals, exactly once
    (idempotent: a resumed or retried turn never counts a record twice)."""
    with prepared_cursor() as cursor:
        cursor.execute(_ROLL_UP_USAGE_SQL, {"session": session_id})


_ROLL_UP_USAGE_CTE = """
counted AS (
    UPDATE agents_usagerecord SET counted = true
    WHERE session_id = %(session)s AND NOT counted
    RETURNING input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost
)
UPDATE agents_session SET
    input_tokens = input_tokens + (SELECT coalesce(sum(input_tokens), 0) FROM counted),
    output_tokens = output_tokens + (SELECT coalesce(sum(output_tokens), 0) FROM counted),
    cache_read_tokens = cache_read_tokens + (SELECT coalesce(sum(cache_read_tokens), 0) FROM counted),
    cache_write_tokens = cache_write_tokens + (SELECT coalesce(sum(cache_write_tokens), 0) FROM counted),
    cost = cost + (SELECT coalesce(sum(cost), 0) FROM counted),
    last_activity_at = now()
WHERE id = %(session)s
"""
_ROLL_UP_USAGE_SQL = "WITH " + _ROLL_UP_USAGE_CTE
# The turn, its thread and the session's totals: one statement, one snapshot, one commit.
_TURN_AND_THREAD_CTES = """
WITH turn AS (
    UPDATE agents_turn SET state = %(state)s, response_text = %(text)s, error = %(error)s,
        finished_at = %(finished_at)s
    WHERE id = %(turn)s
), thread AS (
    UPDATE agents_thread SET state = %(thread_state)s WHERE id = %(thread)s
), """
_FINISH_TURN_SQL = _TURN_AND_THREAD_CTES + _ROLL_UP_USAGE_CTE


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


def do_set_title(session: Session, title: str) -> None:
    Session._base_manager.filter(pk=session.pk).update(title=title.strip()[:200])
