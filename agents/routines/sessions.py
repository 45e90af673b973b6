"""Sessions for routine runs, made many at a time.

An agent routine runs in the session that scheduled it or, without one, in a session
of its own made on first use; a light routine runs in a fresh session each time
(``agents.routines.light``). :func:`new_sessions` makes them for a batch: a user's
first chat with the agent through ``do_create_session`` (which seeds their files),
the rest in one statement (:mod:`agents.routines.rows`).

The planner gives an agent routine its own session when it plans the routine's
fire (:func:`give_own_sessions`), seconds before the fire is due, so the firing
thread only writes the message when the time comes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection

from agents.actions.conversation import do_create_session
from agents.models import ActionKind, Routine, Session, Thread
from agents.routines.light import LIGHT_CHANNEL
from agents.routines.rows import insert_write, write_together


def needs_own_session(routine: Routine) -> bool:
    """An agent routine without a usable session of its own (none yet, or one of
    another agent: the routine was moved to another agent)."""
    if routine.action != ActionKind.AGENT:
        return False
    session = routine.session if routine.session_id else None
    return session is None or session.agent_id != routine.agent_id


def give_own_sessions(routines: Sequence[Routine]) -> list[Routine]:
    """Make each agent routine that :func:`needs_own_session` its session and set it
    on the routine (not saved: the caller writes ``session`` with its other fields).
    Returns the routines that got one."""
    owners = [routine for routine in routines if needs_own_session(routine)]
    for routine, session in zip(owners, new_sessions(owners), strict=True):
        routine.session = session
    return owners


def new_sessions(routines: Sequence[Routine]) -> list[Session]:
    """A new session for each routine, in order (a routine may come twice: two
    light fires of one routine get two sessions)."""
    if not routines:
        return []
    pairs = {(routine.agent_id, routine.user_id) for routine in routines if routine.user_id}
    known = _chatted(pairs)
    sessions: list[Session] = []
    rows: list[Session] = []
    threads: list[Thread] = []
    for routine in routines:
        title = f"Routine: {routine.name}"[:200]
        pair = (routine.agent_id, routine.user_id)
        # A light run: its own channel (the minimal prompt) on the agent's cheap model.
        light = routine.action == ActionKind.LIGHT
        channel = LIGHT_CHANNEL if light else "routine"
        cheap = routine.agent.cheap_model_id if light else None
        if routine.user_id and pair not in known:
            session = do_create_session(routine.agent, user=routine.user, channel=channel, title=title)
            if cheap is not None:
                Session._base_manager.filter(pk=session.pk).update(model_override_id=cheap)
                session.model_override_id = cheap
            known.add(pair)
        else:
            thread = Thread(tenant_id=routine.tenant_id)
            session = Session(
                tenant_id=routine.tenant_id,
                agent=routine.agent,
                user_id=routine.user_id,
                channel=channel,
                title=title,
                active_thread_id=thread.pk,
                model_override_id=cheap,
            )
            thread.session = session
            rows.append(session)
            threads.append(thread)
        sessions.append(session)
    # The session and its thread point at each other (the foreign keys are checked
    # at the end of the transaction): both in one statement.
    write_together([insert_write(Session, rows), insert_write(Thread, threads)])
    return sessions


_CHATTED_SQL = """
SELECT p.agent_id, p.user_id FROM unnest(%s::bigint[], %s::bigint[]) AS p(agent_id, user_id)
WHERE EXISTS (SELECT 1 FROM agents_session s WHERE s.agent_id = p.agent_id AND s.user_id = p.user_id)
"""


def _chatted(pairs: set[tuple[Any, Any]]) -> set[tuple[Any, Any]]:
    """The (agent, user) pairs that have a session already (``is_first_chat`` for
    each, in one statement)."""
    if not pairs:
        return set()
    ordered = sorted(pairs)
    with connection.cursor() as cursor:
        cursor.execute(_CHATTED_SQL, [[p[0] for p in ordered], [p[1] for p in ordered]])
        return {(row[0], row[1]) for row in cursor.fetchall()}
