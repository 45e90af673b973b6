"""Runs: a message becomes a queued Run, and people stop runs and decide approvals.

Each action is one transaction that writes its audit row; the django-q2 task that
executes a run is enqueued with the transaction (``enqueue_run_with_commit``), so
rolled-back work enqueues nothing.
The worker side (claim, lease, resume) is ``agents.runtime.worker``.
"""

from __future__ import annotations

import functools
from functools import partial
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import connection, transaction
from django.dispatch import Signal
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.tasks import async_task

from agents.actions.conversation import do_finish_turn, do_start_turn
from agents.engine.commands import parse_approval_reply, parse_slash_command
from agents.models import (
    ACTIVE_RUN_STATUSES,
    FINISHED_RUN_STATUSES,
    Agent,
    ApprovalRequest,
    ApprovalStatus,
    BusyPolicy,
    Run,
    RunStatus,
    Session,
    Turn,
)
from agents.runtime.events import store_run_event
from claw_platform.audit.actions import record_audit_event
from claw_platform.prepared import prepared_cursor
from claw_platform.raw_rows import instances, select_list
from claw_platform.tenancy.context import tenant_context
from claw_platform.tenancy.lookup import member_role
from claw_platform.tenancy.member_rule import Caller
from claw_platform.tenancy.models import Role

RUN_TASK = "agents.runtime.worker.execute_run"
RUNS_TASK = "agents.runtime.worker.execute_runs"  # a batch of runs (message_batch)
# Sent inside do_decide_approval's transaction with ``approval`` and ``acting_user``:
# the tools app records an "always" grant there (tools_app.signals).
approval_decided = Signal()
# Workers LISTEN here to claim a new run the moment it is committed.
RUN_NOTIFY_CHANNEL = "claw_runs"
# API calls waiting for a run (``wait`` mode, the OpenAI endpoint) LISTEN here: a run
# id arrives when the transaction that settled the run (finished it, or paused it for
# approval) commits.
RUN_SETTLED_CHANNEL = "claw_run_settled"


def notify_run_settled(run_id: int, payload: str | None = None) -> None:
    """Tell waiting API calls the run settled; delivered when the transaction commits.
    ``payload`` (``agents.actions.run_snapshot.settle_payload``) may carry the rows."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [RUN_SETTLED_CHANNEL, payload or str(run_id)])


def enqueue_run(run_id: int) -> None:
    """Hand the run to the workers: a NOTIFY for the ones listening (they claim it
    within milliseconds) and a django-q2 task, the durable path that delivers it
    even when nobody listened. Enqueueing twice is harmless: only one worker can
    claim a run (``agents.runtime.claims.claim_run``). Call it after the run's
    transaction commits (``on_commit``)."""
    enqueue_runs([run_id])


def enqueue_runs(run_ids: list[int]) -> None:
    """:func:`enqueue_run` for several runs: one NOTIFY carries their ids, comma
    separated (``agents.runtime.dispatch``)."""
    with connection.cursor() as cursor:
        for start in range(0, len(run_ids), IDS_PER_NOTIFY):
            ids = ",".join(str(run_id) for run_id in run_ids[start : start + IDS_PER_NOTIFY])
            cursor.execute("SELECT pg_notify(%s, %s)", [RUN_NOTIFY_CHANNEL, ids])
    # save=False: a delivered run task leaves no result row (the Run row is the
    # record). Saving one also made django-q2's monitor lock and read up to
    # save_limit result rows to prune them, for every run. Failures are still saved.
    for run_id in run_ids:
        async_task(
            RUN_TASK, run_id, task_name=f"run-{run_id}", group="runs", save=False, broker=_run_broker()
        )


# A notification carries at most 8,000 bytes: 500 ids of up to 15 digits fit.
IDS_PER_NOTIFY = 500


def run_batch_task(run_ids: list[int]) -> TaskPackages | None:
    """With the database broker: the signed django-q2 task package that delivers a
    batch of runs (``agents.runtime.worker.execute_runs``) and its queue's key, for
    the caller to INSERT into its table (``OrmQ``) itself, with the runs
    (``agents.actions.message_batch``); None with another broker
    (``queue_batch_task`` then)."""
    broker = _run_broker()
    if not isinstance(broker, ORM):
        return None
    package = TaskPackages(broker.list_key or Conf.CLUSTER_NAME)
    _batch_task(run_ids, package)
    return package


def queue_batch_task(run_ids: list[int]) -> None:
    """The task of :func:`run_batch_task`, through the broker."""
    _batch_task(run_ids, _run_broker())


def _batch_task(run_ids: list[int], broker: Any) -> None:
    name = f"runs-{run_ids[0]}-{run_ids[-1]}" if run_ids else "runs"
    async_task(RUNS_TASK, list(run_ids), task_name=name, group="runs", save=False, broker=broker)


class TaskPackages:
    """A broker that keeps the signed task packages django-q2 builds (for an INSERT
    of the caller's), in order."""

    def __init__(self, list_key: str) -> None:
        self.list_key = list_key
        self.payloads: list[str] = []

    def enqueue(self, package: str) -> int:
        self.payloads.append(package)
        return len(self.payloads)


@functools.cache
def _run_broker() -> Any:
    """The task queue's broker, built once per process (django-q2's ``async_task``
    builds a new one for every call otherwise); brokers keep no per-call state."""
    return get_broker()


def enqueue_run_with_commit(run_id: int) -> None:
    """Enqueue the run as the current transaction commits. With the database broker
    the task row and the NOTIFY are written inside the transaction (PostgreSQL
    delivers a notification at commit): the run and its task commit together, in
    one commit instead of three. Another broker is told after the commit."""
    if "orm" in settings.Q_CLUSTER and connection.in_atomic_block:
        enqueue_run(run_id)
    else:
        transaction.on_commit(partial(enqueue_run, run_id))


# ------------------------------------------------------------------ access

_UNREAD: Any = object()  # check_session_actor: the session's owner, not read yet


def check_actor(tenant_id: int, actor: Any) -> Caller | None:
    """``actor`` may act on the tenant's runs: a superuser, system code (``None``),
    an API key of the tenant (its scope checked by the API) that a member who is not
    a viewer made or the operator made, or a member who is not a viewer. Others get
    PermissionDenied. Returns the actor as the member rule sees them, for
    :func:`check_session_actor` (None: no rule limits them)."""
    role = member_role(tenant_id, getattr(actor, "pk", None)) if actor_needs_role(tenant_id, actor) else None
    caller = actor_caller(tenant_id, actor, role)
    if caller is not None:
        check_role(caller.role)
    return caller


def actor_needs_role(tenant_id: int, actor: Any) -> bool:
    """Whether ``check_actor`` needs the actor's role in the tenant from the database
    (a user who is not a superuser, or an API key of another tenant: no role, refused)."""
    if actor is None or getattr(actor, "is_superuser", False):
        return False
    # An API key of this tenant (claw_platform.api.principal.ApiKeyActor) carries its
    # creator's role, read when it was authenticated.
    return getattr(actor, "api_key_tenant_id", None) != tenant_id


def actor_caller(tenant_id: int, actor: Any, role: str | None) -> Caller | None:
    """``actor`` as the member rule sees them in the tenant, given ``role`` when
    :func:`actor_needs_role` said it needs one; None when no rule limits them
    (system code, a superuser, a key the operator made)."""
    if actor_needs_role(tenant_id, actor):
        return Caller(tenant_id, getattr(actor, "pk", None), role)
    caller = getattr(actor, "caller", None)
    return caller if isinstance(caller, Caller) and caller.is_person else None


def check_session_actor(caller: Caller | None, session_id: Any, owner_id: Any = _UNREAD) -> None:
    """The member rule for acting in one session: a member acts in their own
    sessions only (``owner_id``: the session's user, read here if not given)."""
    if caller is None or caller.sees_every_session:
        return
    if owner_id is _UNREAD:
        owner_id = Session._base_manager.filter(pk=session_id).values_list("user_id", flat=True).first()
    if not caller.acts_in_session_of(owner_id):
        raise PermissionDenied("You cannot act in this session.")


def check_role(role: str | None) -> None:
    """A member who is not a viewer may act on runs (``check_actor``)."""
    if role is None or role == Role.VIEWER:
        raise PermissionDenied("You cannot act on this tenant's runs.")


def access_run(actor: Any, run_id: Any) -> Run:
    """The run, for the tenant in context and an actor who belongs to it. A run of
    another tenant and a missing run raise the same ``Run.DoesNotExist``."""
    run = Run.objects.select_related("session", "turn").filter(pk=run_id).first()
    if run is None:
        raise Run.DoesNotExist(f"No run {run_id}.")
    try:
        check_session_actor(check_actor(run.tenant_id, actor), run.session_id, run.session.user_id)
    except PermissionDenied:
        raise Run.DoesNotExist(f"No run {run_id}.") from None
    return run


def access_approval(actor: Any, approval_id: Any) -> ApprovalRequest:
    """Same rules as :func:`access_run`, for an approval request."""
    approval = ApprovalRequest.objects.select_related("run__session").filter(pk=approval_id).first()
    if approval is None:
        raise ApprovalRequest.DoesNotExist(f"No approval request {approval_id}.")
    try:
        caller = check_actor(approval.tenant_id, actor)
        check_session_actor(caller, approval.run.session_id, approval.run.session.user_id)
    except PermissionDenied:
        raise ApprovalRequest.DoesNotExist(f"No approval request {approval_id}.") from None
    return approval


def active_run(session: Session) -> Run | None:
    """The session's run that holds or waits for its slot: running first, else the
    oldest queued one, else one awaiting approval."""
    runs = Run._base_manager.filter(
        session_id=session.pk, status__in=[*ACTIVE_RUN_STATUSES, RunStatus.AWAITING_APPROVAL]
    )
    order = {RunStatus.RUNNING: 0, RunStatus.QUEUED: 1, RunStatus.AWAITING_APPROVAL: 2}
    return min(runs, key=lambda r: (order[RunStatus(r.status)], r.pk), default=None)


# ---------------------------------------------------------------- messages


@functools.cache
def _lock_session_sql() -> str:
    # The session's row (locked) with its agent (claw_platform.raw_rows), and the
    # agent's current revision (the run records it): one round trip, not two.
    columns = select_list(("s", Session), ("a", Agent))
    return (
        f"SELECT {columns}, "  # noqa: S608
        "(SELECT max(r.number) FROM agents_agentrevision r WHERE r.agent_id = s.agent_id) "
        "FROM agents_session s JOIN agents_agent a ON a.id = s.agent_id "
        "WHERE s.id = %(session)s AND s.tenant_id = %(tenant)s FOR NO KEY UPDATE OF s"
    )


class AgentDisabled(Exception):
    """The session's agent is switched off; ``do_send_message(..., require_enabled=True)``
    starts nothing."""


@transaction.atomic
def do_send_message(
    session: Session,
    text: str,
    *,
    acting_user: Any,
    require_enabled: bool = False,
    api_key_id: int | None = None,
) -> Run | None:
    """A user message: its Turn and a queued Run, enqueued when the transaction
    commits, and a stored ``run.queued`` event (so every open tab shows it at once).
    ``/stop`` cancels the session's active run instead (returned, or None when
    nothing runs). Other slash commands are answered inline by
    ``agents.runtime.chat.handle_message``, not here.

    While a run awaits approval, a reply such as ``approve`` / ``go ahead`` / ``deny``
    / ``always`` decides its pending calls (T13) and returns that run; any other
    message supersedes it (the waiting run is cancelled, its calls never run) and
    starts a new turn.

    One run per session executes at a time (S6): a new message queues behind the
    active run, or, when the agent's ``busy_policy`` is ``interrupt``, cancels it.

    ``session`` may be an unsaved ``Session(pk=…, tenant_id=…)``: its row is read
    here, for that tenant only (``Session.DoesNotExist`` otherwise). ``api_key_id``:
    the API key of the request, recorded on the run (its usage is reported by key).
    """
    caller = check_actor(session.tenant_id, acting_user)
    command = parse_slash_command(text)
    if command is not None:
        if command.name != "stop":
            raise ValueError(f"/{command.name} is answered by chat.handle_message, not queued as a run")
        current = active_run(session)
        return do_cancel_run(current, acting_user=acting_user) if current is not None else None
    # The session's row lock orders concurrent messages of one session. Only that
    # row (``of``: a join would lock the agent too, and every session, run and usage
    # row of the agent references it), and NO KEY: rows referencing the session
    # (messages, runs) can still be written meanwhile.
    with prepared_cursor() as cursor:  # for every message: a plain statement
        cursor.execute(_lock_session_sql(), {"session": session.pk, "tenant": session.tenant_id})
        row = cursor.fetchone()
    if row is None:
        raise Session.DoesNotExist(f"No session {session.pk}.")
    *columns, revision = row
    locked, locked.agent = instances(tuple(columns), Session, Agent)
    try:
        check_session_actor(caller, locked.pk, locked.user_id)
    except PermissionDenied:
        # Another member's chat is refused like a missing one (the member rule).
        raise Session.DoesNotExist(f"No session {session.pk}.") from None
    if require_enabled and not locked.agent.enabled:
        raise AgentDisabled(locked.agent.slug)
    waiting = (
        list(
            Run._base_manager.select_for_update(no_key=True)
            .filter(session_id=session.pk, status=RunStatus.AWAITING_APPROVAL)
            .order_by("id")
        )
        if _awaiting_approval(session.pk)
        else []
    )
    reply = parse_approval_reply(text) if waiting else None
    if reply is not None:
        run = waiting[-1]
        for approval in ApprovalRequest._base_manager.filter(run_id=run.pk, status=ApprovalStatus.PENDING):
            do_decide_approval(
                approval,
                reply.approved,
                acting_user=acting_user,
                reason=f"chat reply: {text.strip()[:200]}",
                always=reply.always,
            )
        return run
    for run in waiting:
        do_cancel_run(run, acting_user=acting_user, reason="superseded by a new message")
    if locked.agent.busy_policy == BusyPolicy.INTERRUPT:
        for run in Run._base_manager.filter(session_id=session.pk, status__in=ACTIVE_RUN_STATUSES):
            do_cancel_run(run, acting_user=acting_user, reason="interrupted by a new message")
    with tenant_context(session.tenant_id):
        turn = do_start_turn(locked, text)
    run = Run._base_manager.create(
        tenant_id=session.tenant_id,
        session_id=session.pk,
        turn=turn,
        agent_id=locked.agent_id,
        agent_revision=revision,
        requested_by=acting_user if getattr(acting_user, "pk", None) else None,
        api_key_id=api_key_id,
    )
    record_audit_event(
        action="run.created",
        actor=acting_user,
        obj=run,
        diff={"session": [None, str(session.pk)], "turn": [None, turn.pk]},
    )
    store_run_event(
        run,
        "run.queued",
        {"turn": turn.pk, "number": turn.number, "text": text, "user": display_name(acting_user)},
    )
    enqueue_run_with_commit(run.pk)
    return run


def _awaiting_approval(session_id: Any) -> bool:
    """Whether a run of the session waits for approval (rarely: the rows are then
    read, and locked, through the ORM). The session's row is locked already."""
    with prepared_cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM agents_run WHERE session_id = %s AND status = %s)",
            [session_id, RunStatus.AWAITING_APPROVAL],
        )
        return bool((cursor.fetchone() or (False,))[0])


def display_name(user: Any) -> str:
    if user is None or not getattr(user, "pk", None):
        return ""
    return str(user.get_full_name() or user.get_username())


# ----------------------------------------------------------------- cancel


@transaction.atomic
def do_cancel_run(run: Run, *, acting_user: Any, reason: str = "stopped by the user") -> Run:
    """Stop a run. A queued run or one awaiting approval ends ``cancelled`` at once;
    a running one gets ``cancel_requested``, which its worker polls (every
    ``CANCEL_POLL_SECONDS``) and turns into the run's CancelToken firing, also
    mid-stream; the worker then ends it ``cancelled`` with the partial text kept."""
    check_session_actor(check_actor(run.tenant_id, acting_user), run.session_id)
    locked = Run._base_manager.select_for_update().get(pk=run.pk, tenant_id=run.tenant_id)
    if locked.status in FINISHED_RUN_STATUSES:
        return locked
    if locked.status == RunStatus.RUNNING:
        if not locked.cancel_requested:
            Run._base_manager.filter(pk=locked.pk).update(cancel_requested=True)
            locked.cancel_requested = True
            record_audit_event(
                action="run.cancel_requested", actor=acting_user, obj=locked, diff={"reason": [None, reason]}
            )
        return locked
    finish_unstarted_run(locked, RunStatus.CANCELLED, error=reason)
    record_audit_event(
        action="run.cancelled",
        actor=acting_user,
        obj=locked,
        diff={"status": [RunStatus.QUEUED, "cancelled"]},
    )
    return locked


def finish_unstarted_run(run: Run, status: str, *, error: str = "") -> None:
    """End a run no worker is executing (queued, awaiting approval, or with a dead
    worker): the run, its turn, its open approval requests and a terminal event.
    Runs inside the caller's transaction, with the run's row locked."""
    now = timezone.now()
    Run._base_manager.filter(pk=run.pk).update(
        status=status, finished_at=now, error=error[:5000], lease_owner="", lease_expires_at=None
    )
    ApprovalRequest._base_manager.filter(run_id=run.pk, status=ApprovalStatus.PENDING).update(
        status=ApprovalStatus.DENIED, decided_at=now, reason=f"run {status}"
    )
    turn = Turn._base_manager.get(pk=run.turn_id)
    do_finish_turn(turn, status=status, text=turn.partial_text, error=error)
    event = "run.cancelled" if status == RunStatus.CANCELLED else "run.failed"
    store_run_event(run, event, {"status": status, "error": error, "text": turn.partial_text})
    run.status = status
    run.finished_at = now
    notify_run_settled(run.pk)
    # The session's next run (if one waits) can start now.
    transaction.on_commit(partial(enqueue_next_runs, run.session_id))


def enqueue_next_runs(session_id: Any, *, limit: int = 3) -> None:
    """After a run ends: enqueue the session's next queued run and the oldest waiting
    runs (held back by limits), so a freed slot is used at once, not at the next sweep."""
    with prepared_cursor() as cursor:  # after every run: one plain statement
        cursor.execute(_NEXT_RUNS_SQL, {"session": session_id, "queued": RunStatus.QUEUED, "limit": limit})
        run_ids = [row[0] for row in cursor.fetchall()]
    enqueue_runs(list(dict.fromkeys(run_ids)))


# The session's next queued run, then the oldest queued runs of any session.
_NEXT_RUNS_SQL = """
(SELECT 0 AS rank, id FROM agents_run WHERE session_id = %(session)s AND status = %(queued)s ORDER BY id LIMIT 1)
UNION ALL
(SELECT 1 AS rank, id FROM agents_run WHERE status = %(queued)s ORDER BY id LIMIT %(limit)s)
ORDER BY rank, id
"""


# --------------------------------------------------------------- approvals


@transaction.atomic
def do_decide_approval(
    approval: ApprovalRequest, approved: bool, *, acting_user: Any, reason: str = "", always: bool = False
) -> ApprovalRequest:
    """Approve or deny one tool call. ``always`` (with approval) also allows this
    exact call -- same tool, same arguments -- for the rest of the session (T12).
    When none of the run's requests is pending any more, the run goes back to the
    queue and resumes with the decisions (an approved call runs; a denied one is
    reported to the model as denied). Every tab hears ``approval.decided``."""
    caller = check_actor(approval.tenant_id, acting_user)
    run = Run._base_manager.select_for_update().get(pk=approval.run_id, tenant_id=approval.tenant_id)
    check_session_actor(caller, run.session_id)
    locked = ApprovalRequest._base_manager.select_for_update().get(pk=approval.pk)
    if locked.status != ApprovalStatus.PENDING:
        raise ValueError(f"This request was already {locked.status}.")
    if run.status != RunStatus.AWAITING_APPROVAL:
        raise ValueError(f"The run is {run.status}, not awaiting approval.")
    locked.status = ApprovalStatus.APPROVED if approved else ApprovalStatus.DENIED
    locked.always = bool(always and approved)
    locked.decided_by = acting_user if getattr(acting_user, "pk", None) else None
    locked.decided_at = timezone.now()
    locked.reason = reason[:2000]
    locked.save(update_fields=["status", "always", "decided_by", "decided_at", "reason"])
    record_audit_event(
        action="approval.decided",
        actor=acting_user,
        obj=locked,
        diff={
            "status": [ApprovalStatus.PENDING, locked.status],
            "always": [False, locked.always],
            "reason": [None, reason],
        },
    )
    approval_decided.send(sender=ApprovalRequest, approval=locked, acting_user=acting_user)
    store_run_event(
        run,
        "approval.decided",
        {
            "approval": locked.pk,
            "call_id": locked.call_id,
            "status": locked.status,
            "always": locked.always,
            "by": display_name(acting_user),
        },
    )
    if not ApprovalRequest._base_manager.filter(run_id=run.pk, status=ApprovalStatus.PENDING).exists():
        Run._base_manager.filter(pk=run.pk).update(status=RunStatus.QUEUED)
        enqueue_run_with_commit(run.pk)
    return locked
