"""The worker side of runs: claim, lease, heartbeat, cancel, resume, sweep.

- ``execute_run(run_id)`` is the django-q2 task. It claims the run atomically
  (:func:`claim_run`: queued, or running with an expired lease; within the
  session's one slot and the per-tenant/global limits) and hands it to the worker
  process's :class:`RunSupervisor`, then returns: many runs share one worker
  process, because a run waits on the LLM, not the CPU.
- The supervisor owns one long-lived asyncio loop in a thread of the worker
  process. Its watcher polls ``cancel_requested`` of the runs it drives every
  ``CANCEL_POLL_SECONDS`` (one query for all of them) and fires their CancelTokens,
  and renews their leases every third of ``CLAW_RUN_LEASE_SECONDS`` (one UPDATE).
- A run whose turn already has stored messages is resumed with ``resume_turn``
  (after a crash or an approval): a side-effecting call that was started but never
  confirmed finished is reported to the model as interrupted, never re-run.
- :func:`sweep_runs` runs every ``CLAW_RUN_SWEEP_SECONDS`` in each ``claw_worker``
  (a thread next to the cluster): it re-enqueues runs whose lease expired and runs
  still waiting for a slot, and ends runs whose dead worker was asked to cancel.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from agents.actions.runs import enqueue_next_runs, enqueue_run, finish_unstarted_run
from agents.engine.interfaces import CancelToken, ToolExecutor
from agents.models import (
    ApprovalRequest,
    ApprovalStatus,
    Message,
    Run,
    RunEvent,
    RunStatus,
    Session,
    Turn,
    TurnState,
)
from agents.runtime.chat import ToolsFactory, run_started_turn
from agents.runtime.events import TERMINAL_EVENTS, RunEventSink
from agents.runtime.llm import close_providers
from agents.runtime.resolution import ResolvedAgent, resolve_agent
from claw_platform.db import db_async, is_database_outage
from claw_platform.tenancy.context import tenant_context

logger = logging.getLogger("claw.runs.worker")

CANCEL_POLL_SECONDS = 0.25
# Claims are serialised by this advisory lock so the limit counts cannot race; a
# claim is one short transaction, so the lock is held for a millisecond or two.
_CLAIM_LOCK_KEY = 0x636C6177  # "claw"


@dataclass(frozen=True)
class Claim:
    run_id: int
    tenant_id: int
    session_id: Any
    turn_id: int
    attempt: int
    event_seq: int
    resume: bool


_CLAIM_SQL = """
WITH cand AS (
    SELECT r.id FROM agents_run r
    WHERE r.id = %(run)s AND NOT r.cancel_requested
      AND (r.status = 'queued' OR (r.status = 'running' AND r.lease_expires_at < now()))
      AND NOT EXISTS (
          SELECT 1 FROM agents_run o
          WHERE o.session_id = r.session_id AND o.id <> r.id
            AND (o.status = 'running' OR (o.status = 'queued' AND o.id < r.id)))
      AND (SELECT count(*) FROM agents_run t
           WHERE t.tenant_id = r.tenant_id AND t.status = 'running' AND t.id <> r.id) < %(per_tenant)s
      AND (SELECT count(*) FROM agents_run g WHERE g.status = 'running' AND g.id <> r.id) < %(global)s
    FOR UPDATE OF r SKIP LOCKED
)
UPDATE agents_run r SET status = 'running', attempt = r.attempt + 1, lease_owner = %(owner)s,
    lease_expires_at = now() + make_interval(secs => %(lease)s), heartbeat_at = now(),
    started_at = coalesce(r.started_at, now())
FROM cand WHERE r.id = cand.id
RETURNING r.id, r.tenant_id, r.session_id, r.turn_id, r.attempt, r.event_seq
"""

# A run queued behind another opened its turn (and undo checkpoint) when the message
# arrived; its checkpoint must point after the earlier run's messages.
_FIX_CHECKPOINT_SQL = """
UPDATE agents_checkpoint c SET message_seq = t.last_seq
FROM agents_turn tu JOIN agents_thread t ON t.id = tu.thread_id
WHERE tu.id = %(turn)s AND c.thread_id = tu.thread_id AND c.number = tu.number
"""


def claim_run(run_id: int, owner: str) -> Claim | None:
    """Take the run for ``owner`` if it is claimable now; ``None`` otherwise (another
    worker has it, its session is busy, a limit is reached, or it is finished)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_CLAIM_LOCK_KEY])
        cursor.execute(
            _CLAIM_SQL,
            {
                "run": run_id,
                "owner": owner[:200],
                "lease": float(settings.CLAW_RUN_LEASE_SECONDS),
                "per_tenant": settings.CLAW_RUNS_PER_TENANT,
                "global": settings.CLAW_RUNS_GLOBAL,
            },
        )
        row = cursor.fetchone()
        if row is None:
            return None
        run_pk, tenant_id, session_id, turn_id, attempt, event_seq = row
        resume = Message._base_manager.filter(turn_id=turn_id).exists()
        if not resume:
            cursor.execute(_FIX_CHECKPOINT_SQL, {"turn": turn_id})
    return Claim(run_pk, tenant_id, session_id, turn_id, attempt, event_seq, resume)


# --------------------------------------------------------------- the task


def execute_run(run_id: int, wait: bool = False) -> str:
    """django-q2 task: claim the run and hand it to this process's event loop.
    Returns at once (``wait=True``, for tests and tools, waits for the outcome)."""
    sup = supervisor()
    if sup.busy >= settings.CLAW_RUNS_PER_WORKER:
        return "busy"  # stays queued; a freed slot or the sweeper enqueues it again
    claim = claim_run(run_id, sup.owner)
    if claim is None:
        return "not claimed"
    future = sup.submit(claim)
    return future.result() if wait else "started"


def tools_factory() -> ToolsFactory:
    factory: ToolsFactory = import_string(settings.CLAW_RUN_TOOLS_FACTORY)
    return factory


class RunSupervisor:
    """One per worker process: an asyncio loop in a thread that drives the runs this
    process claimed, plus the watcher that cancels and heartbeats them."""

    def __init__(self) -> None:
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.tokens: dict[int, CancelToken] = {}
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="claw-runs", daemon=True)
        self.thread.start()
        self._watcher = asyncio.run_coroutine_threadsafe(self._watch(), self.loop)

    @property
    def busy(self) -> int:
        return len(self.tokens)

    def submit(self, claim: Claim) -> concurrent.futures.Future[str]:
        token = CancelToken()
        self.tokens[claim.run_id] = token
        return asyncio.run_coroutine_threadsafe(self._drive(claim, token), self.loop)

    async def _drive(self, claim: Claim, token: CancelToken) -> str:
        started = time.monotonic()
        outcome = "crashed"
        try:
            with tenant_context(claim.tenant_id):
                outcome = await _execute(claim, token, self.owner)
                return outcome
        except Exception:
            logger.exception("run %s crashed", claim.run_id)
            return outcome
        finally:
            logger.info(
                "run %s (attempt %s%s) ended %s after %.2f s",
                claim.run_id,
                claim.attempt,
                ", resumed" if claim.resume else "",
                outcome,
                time.monotonic() - started,
            )
            self.tokens.pop(claim.run_id, None)
            try:
                await db_async(enqueue_next_runs)(claim.session_id)
            except Exception:
                logger.exception("could not enqueue the runs waiting after run %s", claim.run_id)

    async def _watch(self) -> None:
        renew_every = max(0.5, settings.CLAW_RUN_LEASE_SECONDS / 3)
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(CANCEL_POLL_SECONDS)
            ids = list(self.tokens)
            if not ids:
                continue
            try:
                for run_id in await db_async(_cancel_requested)(ids):
                    token = self.tokens.get(run_id)
                    if token is not None:
                        token.cancel("cancelled")
                if time.monotonic() - renewed >= renew_every:
                    renewed = time.monotonic()
                    kept = await db_async(_renew_leases)(ids, self.owner)
                    for run_id in set(ids) - kept:
                        token = self.tokens.get(run_id)
                        if token is not None:
                            # Another worker took the run over: stop touching it.
                            token.cancel("lease_lost")
            except Exception:
                logger.exception("run watcher failed; retrying")

    def shutdown(self) -> None:
        """Stop the loop (tests; a worker process simply exits)."""
        for token in list(self.tokens.values()):
            self.loop.call_soon_threadsafe(token.cancel, "worker stopping")
        self._watcher.cancel()
        try:
            asyncio.run_coroutine_threadsafe(close_providers(), self.loop).result(timeout=10)
        except Exception:
            logger.exception("closing providers failed")
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


_supervisor: RunSupervisor | None = None
_supervisor_lock = threading.Lock()


def supervisor() -> RunSupervisor:
    global _supervisor
    with _supervisor_lock:
        if _supervisor is None:
            _supervisor = RunSupervisor()
        return _supervisor


def shutdown_supervisor() -> None:
    global _supervisor
    with _supervisor_lock:
        sup, _supervisor = _supervisor, None
    if sup is not None:
        sup.shutdown()


def _cancel_requested(ids: list[int]) -> list[int]:
    return list(Run._base_manager.filter(pk__in=ids, cancel_requested=True).values_list("pk", flat=True))


def _renew_leases(ids: list[int], owner: str) -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE agents_run SET lease_expires_at = now() + make_interval(secs => %s), heartbeat_at = now() "
            "WHERE id = ANY(%s) AND lease_owner = %s AND status = 'running' RETURNING id",
            [float(settings.CLAW_RUN_LEASE_SECONDS), ids, owner],
        )
        return {row[0] for row in cursor.fetchall()}


# --------------------------------------------------------------- one run


def _load(claim: Claim) -> tuple[Session, Turn, dict[str, bool]]:
    session = Session._base_manager.select_related("agent", "user").get(
        pk=claim.session_id, tenant_id=claim.tenant_id
    )
    turn = Turn._base_manager.get(pk=claim.turn_id, tenant_id=claim.tenant_id)
    approvals = {
        call_id: status == ApprovalStatus.APPROVED
        for call_id, status in ApprovalRequest._base_manager.filter(run_id=claim.run_id)
        .exclude(status=ApprovalStatus.PENDING)
        .values_list("call_id", "status")
    }
    return session, turn, approvals


async def _execute(claim: Claim, token: CancelToken, owner: str) -> str:
    session, turn, approvals = await db_async(_load)(claim)
    agent: ResolvedAgent = await db_async(resolve_agent)(session.agent_id)
    sink = RunEventSink(claim.run_id, claim.tenant_id, last_seq=claim.event_seq)
    if turn.state in (TurnState.COMPLETE, TurnState.FAILED):
        # The previous attempt finished the turn and died before closing the run:
        # close it now; running the loop again would answer the user twice.
        return await _close_finished_turn(claim, owner, turn, sink)
    if not agent.enabled:
        error = f"The agent {agent.name} is disabled."
        await sink.emit("run.failed", {"status": "failed", "error": error})
        await db_async(_finish_run)(claim, owner, RunStatus.FAILED, error, [], None)
        return RunStatus.FAILED
    base_factory = tools_factory()
    used: list[ToolExecutor] = []

    async def factory(resolved: ResolvedAgent, sess: Session) -> ToolExecutor:
        tools = await base_factory(resolved, sess)
        used.append(tools)
        return tools

    try:
        reply = await run_started_turn(
            session,
            agent,
            turn,
            turn.user_text,
            events=sink,
            cancel=token,
            tools_factory=factory,
            run_id=str(claim.run_id),
            resume=claim.resume,
            approvals=approvals or None,
        )
    except Exception as exc:
        if is_database_outage(exc):
            # Not the run's fault: it resumes from its last persisted step as soon
            # as the database answers again (here or on another worker).
            logger.warning("run %s lost the database (%s); handing it back", claim.run_id, exc)
            await _hand_back(claim, owner)
            return "handed back"
        logger.exception("run %s failed", claim.run_id)
        error = str(exc)[:500] or type(exc).__name__
        if token.reason != "lease_lost":
            await sink.emit("run.failed", {"status": "failed", "error": error})
            await db_async(_finish_run)(claim, owner, RunStatus.FAILED, error, [], None)
        return RunStatus.FAILED
    if token.reason == "lease_lost":
        return "lease_lost"
    status = {"timed_out": RunStatus.FAILED}.get(reply.status, reply.status)
    error = (reply.turn.error if reply.turn else "") or ("timed out" if reply.status == "timed_out" else "")
    pending = list(reply.turn.pending_calls) if reply.turn else []
    if status == RunStatus.FAILED:
        logger.warning("run %s failed: %s", claim.run_id, error)
    await db_async(_finish_run)(claim, owner, status, error or "", pending, used[0] if used else None)
    return str(status)


async def _close_finished_turn(claim: Claim, owner: str, turn: Turn, sink: RunEventSink) -> str:
    cancelled = await db_async(
        lambda: Run._base_manager.filter(pk=claim.run_id, cancel_requested=True).exists()
    )()
    if turn.state == TurnState.COMPLETE:
        status = RunStatus.COMPLETED
    else:
        status = RunStatus.CANCELLED if cancelled else RunStatus.FAILED
    last = await db_async(
        lambda: (
            RunEvent._base_manager.filter(run_id=claim.run_id)
            .order_by("-seq")
            .values_list("type", flat=True)
            .first()
        )
    )()
    if last not in TERMINAL_EVENTS:
        event = {"completed": "run.completed", "cancelled": "run.cancelled"}.get(status, "run.failed")
        await sink.emit(event, {"status": status, "text": turn.response_text, "error": turn.error})
    await db_async(_finish_run)(claim, owner, status, turn.error, [], None)
    return str(status)


async def _hand_back(claim: Claim, owner: str, *, patience: float = 30.0) -> None:
    """Expire our lease and enqueue the run again, retrying while the database is
    away; if it stays away longer, the lease expires on its own and the sweeper of
    whichever worker sees the database first sends the run back."""
    deadline = time.monotonic() + patience
    delay = 0.2
    while True:
        try:
            await db_async(_release_lease)(claim.run_id, owner)
            return
        except Exception as exc:
            if time.monotonic() + delay > deadline:
                logger.warning("could not hand back run %s (%s); its lease will expire", claim.run_id, exc)
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


def _release_lease(run_id: int, owner: str) -> None:
    released = Run._base_manager.filter(pk=run_id, lease_owner=owner, status=RunStatus.RUNNING).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    if released:
        enqueue_run(run_id)


@transaction.atomic
def _finish_run(
    claim: Claim, owner: str, status: str, error: str, pending: list[Any], tools: ToolExecutor | None
) -> bool:
    run = (
        Run._base_manager.select_for_update()
        .filter(pk=claim.run_id, lease_owner=owner, status=RunStatus.RUNNING)
        .first()
    )
    if run is None:
        return False  # the lease was lost: the run is another worker's now
    if status == RunStatus.AWAITING_APPROVAL and run.cancel_requested:
        finish_unstarted_run(run, RunStatus.CANCELLED, error="stopped by the user")
        return True
    now = timezone.now()
    paused = status == RunStatus.AWAITING_APPROVAL
    Run._base_manager.filter(pk=run.pk).update(
        status=status,
        error=error[:5000],
        finished_at=None if paused else now,
        lease_owner="",
        lease_expires_at=None,
        cancel_requested=False,
    )
    if paused:
        ApprovalRequest._base_manager.bulk_create(
            [
                ApprovalRequest(
                    tenant_id=run.tenant_id,
                    run_id=run.pk,
                    call_id=p.call.id[:200],
                    tool_name=p.call.name[:200],
                    arguments=p.call.arguments,
                    risk=tools.traits(p.call.name).risk if tools is not None else "medium",
                    request_reason=p.reason,
                )
                for p in pending
            ],
            ignore_conflicts=True,
        )
    return True


# ------------------------------------------------------------------ sweeper


def sweep_runs(*, limit: int = 100) -> dict[str, int]:
    """Send back runs whose worker died (expired lease) and runs still waiting for a
    slot; end runs whose dead worker had been asked to cancel. Idempotent: it only
    enqueues, and claims are atomic."""
    now = timezone.now()
    dead_cancelled = list(
        Run._base_manager.filter(status=RunStatus.RUNNING, lease_expires_at__lt=now, cancel_requested=True)
        .order_by("id")
        .values_list("id", "tenant_id")[:limit]
    )
    for run_id, tenant_id in dead_cancelled:
        with tenant_context(tenant_id), transaction.atomic():
            run = (
                Run._base_manager.select_for_update(skip_locked=True)
                .filter(pk=run_id, status=RunStatus.RUNNING, lease_expires_at__lt=now)
                .first()
            )
            if run is not None:
                finish_unstarted_run(run, RunStatus.CANCELLED, error="stopped by the user")
    expired = list(
        Run._base_manager.filter(status=RunStatus.RUNNING, lease_expires_at__lt=now, cancel_requested=False)
        .order_by("id")
        .values_list("id", flat=True)[:limit]
    )
    waiting_since = now - timedelta(seconds=settings.CLAW_RUN_SWEEP_SECONDS)
    waiting = list(
        Run._base_manager.filter(status=RunStatus.QUEUED, created_at__lt=waiting_since)
        .order_by("id")
        .values_list("id", flat=True)[:limit]
    )
    for run_id in [*expired, *waiting]:
        enqueue_run(run_id)
    return {"cancelled": len(dead_cancelled), "expired": len(expired), "waiting": len(waiting)}


def start_sweeper_thread(stop: threading.Event) -> threading.Thread:
    """Sweep at once (a restarted worker picks up its crashed runs) and then every
    ``CLAW_RUN_SWEEP_SECONDS`` until ``stop`` is set."""

    def loop() -> None:
        try:
            while not stop.is_set():
                try:
                    close_old_connections()
                    sweep_runs()
                except Exception:
                    logger.exception("run sweep failed")
                stop.wait(settings.CLAW_RUN_SWEEP_SECONDS)
        finally:
            connection.close()

    thread = threading.Thread(target=loop, name="claw-run-sweeper", daemon=True)
    thread.start()
    return thread
