"""Messages in batches: group commit for the messages of many sessions at once.

When two hundred people press Send together, the web process receives two hundred
messages within a few milliseconds, and one transaction each (about a dozen round
trips and a commit) kept the last of them waiting for a second or more.
``do_send_messages`` writes the messages waiting together, in one statement (atomic
by itself): it locks their sessions, opens every turn with its undo checkpoint,
creates every run with its ``run.queued`` event and audit row, enqueues one django-q2
task that delivers them all (``agents.runtime.worker.execute_runs``), and NOTIFYs
the workers once. What a message gets is what ``do_send_message`` would
have written, row for row (a test compares them).

The rare messages that need more go through ``do_send_message`` itself, after the
statement, one by one in their order: a slash command (``/stop``), a session with a
run awaiting approval (the message may be an approval reply, T13), a session whose
agent interrupts its active run (S6), and whatever follows another request of the
same session in the batch. If the statement fails, every message is sent on its own.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import DatabaseError, transaction
from django_q.models import OrmQ

from agents.actions.conversation import MAX_CHECKPOINTS
from agents.actions.runs import (
    RUN_NOTIFY_CHANNEL,
    AgentDisabled,
    actor_caller,
    actor_needs_role,
    check_role,
    display_name,
    do_send_message,
    queue_batch_task,
    run_batch_task,
)
from agents.engine.commands import parse_slash_command
from agents.models import ACTIVE_RUN_STATUSES, BusyPolicy, Run, RunStatus, Session, ThreadState, TurnState
from agents.runtime.events import relay_stored_events
from claw_platform.audit.actions import actor_label
from claw_platform.prepared import prepared_cursor
from claw_platform.tenancy.context import tenant_context
from claw_platform.tenancy.rls import system_bypass

logger = logging.getLogger("claw.runs.messages")

# Messages written by one statement at most (their run ids make one NOTIFY:
# agents.actions.runs.IDS_PER_NOTIFY).
MAX_BATCH = 250

Result = Run | None | Exception


@dataclass(frozen=True)
class MessageRequest:
    """One message for :func:`do_send_messages`; as ``do_send_message``'s arguments."""

    session: Session
    text: str
    acting_user: Any
    require_enabled: bool = False
    api_key_id: int | None = None  # the API key a socket signed in with: on the run, its budget


def do_send_messages(requests: Sequence[MessageRequest]) -> list[Result]:
    """Send each message as ``do_send_message`` would, together (see the module).
    Each request gets its result in order: its Run (``None`` for a ``/stop`` with
    nothing to stop), or the exception ``do_send_message`` would have raised."""
    try:
        # Group commit: one statement writes many tenants' messages (each request was
        # authorised on its own session; the statement matches every row's tenant).
        with system_bypass():
            return _send_together(requests)
    except DatabaseError:
        logger.exception("a batch of %d messages failed; sending them one by one", len(requests))
        return [_send_alone(request) for request in requests]


def _send_alone(request: MessageRequest) -> Result:
    try:
        with tenant_context(request.session.tenant_id):
            return do_send_message(
                request.session,
                request.text,
                acting_user=request.acting_user,
                require_enabled=request.require_enabled,
                api_key_id=request.api_key_id,
            )
    except Exception as exc:
        return exc


def _send_together(requests: Sequence[MessageRequest]) -> list[Result]:
    results: list[Result] = [None] * len(requests)
    plain = [parse_slash_command(request.text) is None for request in requests]
    needs_role = [actor_needs_role(request.session.tenant_id, request.acting_user) for request in requests]
    lookups = {
        (request.session.tenant_id, getattr(request.acting_user, "pk", None))
        for request, needs in zip(requests, needs_role, strict=True)
        if needs
    }
    # One round trip for the actors' roles and the new rows' ids (one per message
    # that may be written together: some turn out not to be, and leave a gap).
    ids, roles = _ids_and_roles(sum(plain), lookups)
    batched: list[int] = []
    alone: list[int] = []
    seen: set[tuple[uuid.UUID, int]] = set()
    for index, request in enumerate(requests):
        tenant_id = request.session.tenant_id
        role = roles.get((tenant_id, getattr(request.acting_user, "pk", None))) if needs_role[index] else None
        caller = actor_caller(tenant_id, request.acting_user, role)
        if caller is not None:
            try:
                check_role(caller.role)
            except PermissionDenied as exc:
                results[index] = exc
                continue
        # The member rule: a member writes only to their own sessions. Checked here on
        # the session as the caller read it; one passed unread (``Session(pk=...)``)
        # goes to do_send_message, which checks the locked row.
        unread = request.session._state.adding
        if caller is not None and not unread and not caller.acts_in_session_of(request.session.user_id):
            results[index] = Session.DoesNotExist(f"No session {request.session.pk}.")
            continue
        limited = caller is not None and not caller.sees_every_session
        key = (_uuid(request.session.pk), tenant_id)
        # A session's first request, if a plain message; what follows it in the batch
        # (a second message, a /stop) is sent after it, one by one, in order.
        if key in seen or not plain[index] or (limited and unread):
            alone.append(index)
        else:
            batched.append(index)
        seen.add(key)
    if batched:
        for index, outcome in zip(batched, _create_runs(requests, batched, ids), strict=True):
            if outcome is _ALONE:
                alone.append(index)
            else:
                results[index] = outcome
    for index in sorted(alone):
        results[index] = _send_alone(requests[index])
    return results


# New runs' and turns' ids (taken before the statement that writes them: the runs'
# django-q2 task carries them, signed), and the roles of the actors who need one.
_IDS_AND_ROLES_SQL = """
SELECT nextval(pg_get_serial_sequence('agents_run', 'id')), nextval(pg_get_serial_sequence('agents_turn', 'id')),
    NULL::bigint, NULL::bigint, NULL::text
FROM generate_series(1, %(count)s)
UNION ALL
SELECT NULL, NULL, m.tenant_id, m.user_id, m.role FROM tenancy_membership m
WHERE (m.tenant_id, m.user_id) IN (SELECT * FROM unnest(%(tenants)s::bigint[], %(users)s::bigint[]))
"""


def _ids_and_roles(
    count: int, lookups: set[tuple[int, Any]]
) -> tuple[list[tuple[int, int]], dict[tuple[int, Any], str]]:
    pairs = [(tenant_id, user_id) for tenant_id, user_id in lookups if user_id is not None]
    with prepared_cursor() as cursor:
        cursor.execute(
            _IDS_AND_ROLES_SQL,
            {"count": count, "tenants": [p[0] for p in pairs], "users": [p[1] for p in pairs]},
        )
        rows = cursor.fetchall()
    ids = [(run_id, turn_id) for run_id, turn_id, *_ in rows if run_id is not None]
    roles = {
        (tenant_id, user_id): str(role) for run_id, _, tenant_id, user_id, role in rows if run_id is None
    }
    return ids, roles


def _uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


_ALONE = object()  # a message the statement left to do_send_message


@functools.cache
def _create_runs_sql() -> str:
    # Each session locked (of its tenant only; the kind of lock do_send_message
    # takes, in one order). Then, for the sessions with nothing but a new turn and
    # run to write (no run awaiting approval, no run to interrupt, an enabled agent
    # when required): do_start_turn's statement (agents.actions.conversation) for
    # every message, each run with its first event (seq 1) and its audit row, one
    # django-q2 task for the runs, and one NOTIFY of their ids. Turn and run ids are
    # given, so every insert reads ``t`` alone: joining the CTEs to one another made
    # PostgreSQL, which expects one row from each, compare every row with every row.
    return f"""
WITH i AS (
    SELECT * FROM unnest(%(sessions)s::uuid[], %(tenants)s::bigint[], %(texts)s::text[], %(users)s::bigint[],
        %(names)s::text[], %(labels)s::text[], %(required)s::bool[], %(runs)s::bigint[], %(turns)s::bigint[],
        %(orders)s::int[], %(api_keys)s::bigint[])
        AS i(session_id, tenant_id, text, user_id, user_name, actor_label, require_enabled, run_id, turn_id, ord,
             api_key_id)
), s AS MATERIALIZED (
    SELECT s.id, s.tenant_id, s.agent_id, s.active_thread_id AS thread_id, a.enabled, a.slug,
        (SELECT max(r.number) FROM agents_agentrevision r WHERE r.agent_id = s.agent_id) AS revision,
        s.active_thread_id IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM agents_run w WHERE w.session_id = s.id AND w.status = %(awaiting)s)
        AND NOT (a.busy_policy = %(interrupt)s
                 AND EXISTS (SELECT 1 FROM agents_run w WHERE w.session_id = s.id AND w.status = ANY(%(active)s)))
        AS plain
    FROM agents_session s JOIN agents_agent a ON a.id = s.agent_id
    WHERE (s.id, s.tenant_id) IN (SELECT session_id, tenant_id FROM i)
    ORDER BY s.id
    FOR NO KEY UPDATE OF s
), go AS MATERIALIZED (
    SELECT i.*, s.agent_id, s.thread_id, s.revision
    FROM i JOIN s ON s.id = i.session_id AND s.tenant_id = i.tenant_id
    WHERE s.plain AND (s.enabled OR NOT i.require_enabled)
), t AS (
    UPDATE agents_thread th SET turn_count = th.turn_count + 1, state = %(processing)s, updated_at = now()
    FROM go WHERE th.id = go.thread_id
    RETURNING go.*, th.turn_count AS number, th.last_seq
), gone AS (
    DELETE FROM agents_checkpoint c USING t
    WHERE c.thread_id = t.thread_id AND (c.undone OR c.number <= t.number - %(keep)s)
    RETURNING c.id
), unlink AS (
    UPDATE agents_message SET undo_checkpoint_id = NULL WHERE undo_checkpoint_id IN (SELECT id FROM gone)
), checkpoint AS (
    INSERT INTO agents_checkpoint (tenant_id, thread_id, number, message_seq, undone, created_at)
    SELECT t.tenant_id, t.thread_id, t.number, t.last_seq, false, now() FROM t
), activity AS (
    UPDATE agents_session s SET last_activity_at = now() FROM go WHERE s.id = go.session_id
), turn AS (
    INSERT INTO agents_turn (id, tenant_id, thread_id, session_id, number, state, user_text, response_text, error,
                             partial_text, started_at, created_at)
    SELECT t.turn_id, t.tenant_id, t.thread_id, t.session_id, t.number, %(running)s, t.text, '', '', '', now(), now()
    FROM t
), run AS (
    INSERT INTO agents_run (id, tenant_id, session_id, turn_id, agent_id, agent_revision, requested_by_id, status,
                            attempt, lease_owner, lease_expires_at, heartbeat_at, cancel_requested, event_seq,
                            error, created_at, started_at, finished_at, api_key_id)
    SELECT t.run_id, t.tenant_id, t.session_id, t.turn_id, t.agent_id, t.revision, t.user_id, %(queued)s,
        0, '', NULL, NULL, false, 1, '', statement_timestamp(), NULL, NULL, t.api_key_id
    FROM t
), event AS (
    INSERT INTO agents_runevent (tenant_id, run_id, seq, type, payload, created_at)
    SELECT t.tenant_id, t.run_id, 1, 'run.queued',
        jsonb_build_object('turn', t.turn_id, 'number', t.number, 'text', t.text, 'user', t.user_name), now()
    FROM t
), audit AS (
    INSERT INTO audit_auditevent (tenant_id, actor_id, actor_label, action, object_type, object_id,
                                  object_repr, diff, ip, created_at)
    SELECT t.tenant_id, t.user_id, t.actor_label, 'run.created', 'agents.run', t.run_id::text,
        'Run ' || t.run_id || ' (queued)',
        jsonb_build_object('session', jsonb_build_array(NULL, t.session_id::text),
                           'turn', jsonb_build_array(NULL, t.turn_id)),
        NULL, now()
    FROM t
), task AS (
    INSERT INTO {OrmQ._meta.db_table} (key, payload, lock)
    SELECT %(task_key)s, %(task)s::text, now() WHERE %(task)s::text IS NOT NULL AND EXISTS (SELECT 1 FROM t)
), notify AS (
    SELECT pg_notify(%(channel)s, ids) FROM (SELECT string_agg(run_id::text, ',' ORDER BY run_id) AS ids FROM t) r
    WHERE ids IS NOT NULL
)
-- The runs created (with their turn's number), then the sessions found (the rest
-- went to do_send_message, or do not exist for the tenant); ``notify`` is read
-- for it to run (it returns no row, or one of nulls).
SELECT t.ord, t.number, statement_timestamp(), NULL::uuid, NULL::bigint, NULL::bool, NULL::text, NULL::bigint,
    NULL::int
FROM t
UNION ALL
SELECT NULL, NULL, NULL, s.id, s.tenant_id, s.enabled, s.slug, s.agent_id, s.revision FROM s
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM notify
"""  # noqa: S608


def _create_runs(
    requests: Sequence[MessageRequest], batched: list[int], ids: list[tuple[int, int]]
) -> list[Any]:
    """Each message's outcome: its Run, an exception, or ``_ALONE``; in one statement
    (atomic by itself: no transaction around it, no BEGIN and COMMIT round trips).
    The new runs' events are relayed once it commits."""
    ids = ids[: len(batched)]
    run_ids = [row[0] for row in ids]
    task = run_batch_task(run_ids)
    users = [requests[index].acting_user for index in batched]
    sessions = [requests[index].session for index in batched]
    with prepared_cursor() as cursor:
        cursor.execute(
            _create_runs_sql(),
            {
                "sessions": [_uuid(session.pk) for session in sessions],
                "tenants": [session.tenant_id for session in sessions],
                "texts": [requests[index].text for index in batched],
                "users": [getattr(user, "pk", None) or None for user in users],
                "names": [display_name(user) for user in users],
                "labels": [actor_label(user) for user in users],
                "required": [requests[index].require_enabled for index in batched],
                "runs": run_ids,
                "turns": [row[1] for row in ids],
                "task": task.payloads[0] if task is not None else None,
                "task_key": task.list_key if task is not None else "",
                "orders": list(range(len(batched))),
                "api_keys": [requests[index].api_key_id for index in batched],
                "awaiting": RunStatus.AWAITING_APPROVAL,
                "interrupt": BusyPolicy.INTERRUPT,
                "active": list(ACTIVE_RUN_STATUSES),
                "processing": ThreadState.PROCESSING,
                "running": TurnState.RUNNING,
                "queued": RunStatus.QUEUED,
                "keep": MAX_CHECKPOINTS,
                "channel": RUN_NOTIFY_CHANNEL,
            },
        )
        rows = cursor.fetchall()
    created = {row[0]: row[1:3] for row in rows if row[0] is not None}
    found = {(row[3], row[4]): row[5:] for row in rows if row[3] is not None}
    outcomes: list[Any] = []
    events: list[tuple[Run, int, str, dict[str, Any]]] = []
    for order, index in enumerate(batched):
        request = requests[index]
        session_id = _uuid(request.session.pk)
        if (session_id, request.session.tenant_id) not in found:
            outcomes.append(Session.DoesNotExist(f"No session {request.session.pk}."))
            continue
        enabled, slug, agent_id, revision = found[(session_id, request.session.tenant_id)]
        if order not in created:
            disabled = request.require_enabled and not enabled
            outcomes.append(AgentDisabled(slug) if disabled else _ALONE)
            continue
        number, created_at = created[order]
        user = users[order]
        run = Run(
            pk=run_ids[order],
            tenant_id=request.session.tenant_id,
            session_id=session_id,
            turn_id=ids[order][1],
            agent_id=agent_id,
            agent_revision=revision,
            requested_by_id=getattr(user, "pk", None) or None,
            status=RunStatus.QUEUED,
            event_seq=1,
            created_at=created_at,
            api_key_id=request.api_key_id,
        )
        outcomes.append(run)
        payload = {"turn": run.turn_id, "number": number, "text": request.text, "user": display_name(user)}
        events.append((run, 1, "run.queued", payload))
    if task is None and events:
        transaction.on_commit(partial(queue_batch_task, [run.pk for run, *_ in events]))
    relay_stored_events(events)
    return outcomes
