"""Regenerate, Edit and Retry from the chat (U3, issue 26 item 2).

All three take back the session's last turn through its undo checkpoint (S3), so the
history the model sees stays consistent: the turn's messages are marked undone (a
failed reply's question is never merged into the next request) and the turn itself
is marked ``rewound`` so no client shows it any more. The caller then sends the
question again (Regenerate, Retry) or the edited text (Edit) as a new turn.
"""

from __future__ import annotations

from django.db import transaction

from agents.actions.conversation import do_undo
from agents.actions.runs import active_run
from agents.models import Checkpoint, Session, Thread, Turn, TurnState

REWIND_MODES = ("regenerate", "edit", "retry")


class RewindRefused(Exception):
    """The last turn cannot be taken back now; the message says why, in plain words."""


@transaction.atomic
def do_rewind_last_turn(session: Session) -> Turn:
    """Take back the newest turn of the session's active thread; returns it."""
    thread_id = session.active_thread_id
    if thread_id is None:
        raise RewindRefused("This chat has no reply to take back yet.")
    Thread._base_manager.select_for_update().filter(pk=thread_id).first()
    if active_run(session) is not None:
        raise RewindRefused("Wait for the current reply to finish (or stop it) first.")
    last = (
        Turn._base_manager.filter(thread_id=thread_id, tenant_id=session.tenant_id)
        .exclude(state=TurnState.REWOUND)
        .order_by("-number")
        .first()
    )
    checkpoint = (
        Checkpoint._base_manager.filter(thread_id=thread_id, undone=False).order_by("-number").first()
    )
    if last is None:
        raise RewindRefused("This chat has no reply to take back yet.")
    if checkpoint is None or checkpoint.number != last.number:
        raise RewindRefused("Only the last reply can be regenerated, edited or retried.")
    do_undo(session)
    Turn._base_manager.filter(thread_id=thread_id, number__gte=last.number).update(state=TurnState.REWOUND)
    return last
