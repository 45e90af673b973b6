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
import functools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import close_old_connections, connection, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from agents.actions.run_snapshot import settle_payload
from agents.actions.runs import (
    enqueue_next_runs,
    enqueue_run,
    finish_unstarted_run,
    notify_run_settled,
)
from agents.engine.interfaces import CancelToken, ToolExecutor
from agents.models import (
    ApprovalRequest,
    ApprovalStatus,
    Run,
    RunEvent,
    RunStatus,
    Session,
    Turn,
    TurnState,
)
from agents.runtime.chat import ToolsFactory, run_started_turn
from agents.runtime.claims import Claim, claim_run, claim_runs
from agents.runtime.dispatch import RunDispatcher
from agents.runtime.events import TERMINAL_EVENTS, RunEventSink, current_relay
from agents.runtime.llm import close_providers
from agents.runtime.resolution import ResolvedAgent, cached_agent, resolve_agent
from agents.runtime.run_facts import FACTS_COLUMNS, RunFacts, facts_columns, facts_from, remember_facts
from claw_platform.db import db_async, is_database_outage, readable_failure
from claw_platform.observability.run_trace import describe_run, traced_run
from claw_platform.prepared import prepared_cursor
from claw_platform.raw_rows import instances, select_list
from claw_platform.tenancy.context import tenant_context
from claw_platform.tenancy.rls import system_bypass

logger = logging.getLogger("claw.runs.worker")

CANCEL_POLL_SECONDS = 0.25


# --------------------------------------------------------------- the task


def execute_run(run_id: int, wait: bool = False) -> str:
    """django-q2 task: claim the run and hand it to this process's event loop.
    Returns at once (``wait=True``, for tests and tools, waits for the outcome)."""
    sup = supervisor()
    if run_id in sup.active:
        return "running here"  # claimed already, the moment it was announced
    if sup.busy >= settings.CLAW_RUNS_PER_WORKER:
        return "busy"  # stays queued; a freed slot or the sweeper enqueues it again
    claim = claim_run(run_id, sup.owner)
    if claim is None:
        return "not claimed"
    future = sup.submit(claim)
    return future.result() if wait else "started"


def execute_runs(run_ids: list[int]) -> str:
    """django-q2 task of a batch of messages' runs (``agents.actions.message_batch``):
    :func:`execute_run` for each, the claims in one transaction. Returns at once."""
    sup = supervisor()
    wanted = [run_id for run_id in run_ids if run_id not in sup.active]
    room = settings.CLAW_RUNS_PER_WORKER - sup.busy
    if not wanted or room <= 0:
        return f"{len(run_ids) - len(wanted)} running here, none started"
    claims = claim_runs(wanted, sup.owner, limit=room)
    for claim in claims:
        sup.submit(claim)
    return f"{len(run_ids) - len(wanted)} running here, {len(claims)} started"


def tools_factory() -> ToolsFactory:
    factory: ToolsFactory = import_string(settings.CLAW_RUN_TOOLS_FACTORY)
    return factory


def warm_up() -> None:
    """Import now what the first run would import on the run loop: the provider
    adapters (aiohttp) and the certificate store of their clients, the channel layer
    the events are relayed through, the tools factory and what it loads on first use
    (the shell policy builds its parser tables at import). Half a second of the
    loop, during which every stream already running would stall."""
    from channels.layers import get_channel_layer

    from agents.providers.base import tls_context
    from agents.providers.registry import PROVIDER_KINDS, provider_class

    for kind in PROVIDER_KINDS:
        provider_class(kind)
    tls_context()
    get_channel_layer()  # the relay's layer: built (its module imported) here, not mid-burst
    tools_factory()
    import tools_app.executor  # noqa: F401


def new_run_loop() -> asyncio.AbstractEventLoop:
    """The event loop for a process's runs (``CLAW_RUN_LOOP``): uvloop's reads the
    provider streams and the database sockets in libuv, which took the worker's CPU
    per relayed token from ~61 to ~55 us in bench/stream."""
    if settings.CLAW_RUN_LOOP == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class RunSupervisor:
    """One per worker process: an asyncio loop in a thread that drives the runs this
    process claimed, plus the watcher that cancels and heartbeats them."""

    def __init__(self) -> None:
        warm_up()
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        # The runs this process holds: claimed (by the dispatcher's thread or a task)
        # and not finished. A set, so both threads may add and drop without a lock.
        self.active: set[int] = set()
        self.tokens: dict[int, CancelToken] = {}
        self.tasks: dict[int, asyncio.Task[str]] = {}
        self.loop = new_run_loop()
        # The runs' database calls (``db_async``) run in these threads, each with its
        # own connection: asyncio's default (CPU count + 4) queues fifty runs' calls
        # behind six threads.
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=settings.CLAW_DB_THREADS, thread_name_prefix="claw-db"
        )
        self.loop.set_default_executor(self.executor)
        self.thread = threading.Thread(target=self.loop.run_forever, name="claw-runs", daemon=True)
        self.thread.start()
        self._watcher = asyncio.run_coroutine_threadsafe(self._watch(), self.loop)
        self._dispatcher: RunDispatcher | None = None
        # Runs being set up at once (reading their configuration, tools and history:
        # most of a run's database calls, and CPU). The others wait their turn, first
        # come first served: a burst of runs then starts one after another instead
        # of all of them slowly together, and the streams already running keep their
        # pace meanwhile.
        self._setups = asyncio.Semaphore(settings.CLAW_RUN_SETUPS)

    @property
    def busy(self) -> int:
        return len(self.active)

    def submit(self, claim: Claim) -> concurrent.futures.Future[str]:
        """Drive a claimed run on this supervisor's loop (from any thread); the
        future gives the run's outcome."""
        self.active.add(claim.run_id)

        async def drive() -> str:
            return await self._start(claim)

        return asyncio.run_coroutine_threadsafe(drive(), self.loop)

    def _start(self, claim: Claim) -> asyncio.Task[str]:
        token = CancelToken()
        self.tokens[claim.run_id] = token
        task = self.loop.create_task(self._drive(claim, token))
        self.tasks[claim.run_id] = task
        task.add_done_callback(lambda _t: self.tasks.pop(claim.run_id, None))
        return task

    # ------------------------------------------------------- instant dispatch

    def start_listening(self) -> None:
        """Claim new runs the moment they are committed (``agents.runtime.dispatch``)."""
        if self._dispatcher is None:
            self._dispatcher = RunDispatcher(self.owner, self._room, self._hand_over)

    def _room(self) -> int:
        return settings.CLAW_RUNS_PER_WORKER - self.busy

    def _hand_over(self, claim: Claim) -> None:
        # From the dispatcher's thread: the run is ours from now on.
        self.active.add(claim.run_id)
        self.loop.call_soon_threadsafe(self._start, claim)

    async def _drive(self, claim: Claim, token: CancelToken) -> str:
        started = time.monotonic()
        outcome = "crashed"
        setup = _SetupSlot(self._setups)
        try:
            await setup.acquire()
            with tenant_context(claim.tenant_id):
                outcome = await _execute(claim, token, self.owner, setup.release)
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
            setup.release()
            self.tokens.pop(claim.run_id, None)
            self.active.discard(claim.run_id)
            try:
                with tenant_context(claim.tenant_id):  # the session's own waiting runs
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
        """Stop: runs still going are handed back (their leases released and the
        runs enqueued), so another worker resumes each from its last persisted step
        at once -- a stopping worker never ends a user's run as cancelled or failed."""
        if self._dispatcher is not None:
            self._dispatcher.stop()
        self._watcher.cancel()
        # Claimed runs, started or still waiting to be: all are handed back.
        running = sorted(self.active | set(self.tokens))

        async def stop_runs() -> None:
            for task in list(self.tasks.values()):
                task.cancel()
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)
            await close_providers()
            await _release_loop()

        try:
            asyncio.run_coroutine_threadsafe(stop_runs(), self.loop).result(timeout=10)
        except Exception:
            logger.exception("stopping the runs' tasks failed")
        for run_id in running:
            try:
                _release_lease(run_id, self.owner)
            except Exception:
                logger.exception("could not hand back run %s; its lease will expire", run_id)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.loop.close()


async def _release_loop() -> None:
    """Before the run loop closes, as ``asyncio.run`` does: the relay's hold on it
    (the channel layer's connection pool) released, and every other task cancelled
    and awaited. A task left pending is destroyed later, during some garbage
    collection, and logs a traceback there; in CPython 3.11 formatting one inside
    another thread's ``ast.parse`` breaks it ("AST constructor recursion depth
    mismatch", seen in the tests after a worker stopped)."""
    close = getattr(current_relay(), "close_loop", None)
    if close is not None:
        await close()
    current = asyncio.current_task()
    others = [task for task in asyncio.all_tasks() if task is not current]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


class _SetupSlot:
    """A run's place among the runs being set up: taken once, given back once."""

    def __init__(self, semaphore: asyncio.Semaphore) -> None:
        self._semaphore = semaphore
        self._held = False

    async def acquire(self) -> None:
        await self._semaphore.acquire()
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._semaphore.release()


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
    # Four times a second with every active run's id: one prepared statement and an
    # array, not the ORM compiling an IN list of hundreds of parameters each time.
    # The worker's active runs, of every tenant: system code.
    with system_bypass(), prepared_cursor() as cursor:
        cursor.execute("SELECT id FROM agents_run WHERE id = ANY(%s) AND cancel_requested", [ids])
        return [row[0] for row in cursor.fetchall()]


def _renew_leases(ids: list[int], owner: str) -> set[int]:
    # The leases of the worker's runs, of every tenant: system code.
    with system_bypass(), prepared_cursor() as cursor:
        cursor.execute(
            "UPDATE agents_run SET lease_expires_at = now() + make_interval(secs => %s), heartbeat_at = now() "
            "WHERE id = ANY(%s) AND lease_owner = %s AND status = 'running' RETURNING id",
            [float(settings.CLAW_RUN_LEASE_SECONDS), ids, owner],
        )
        return {row[0] for row in cursor.fetchall()}


# --------------------------------------------------------------- one run


@functools.cache
def _load_sql() -> str:
    # The session (with its user: the prompt names them), the turn and the run's
    # facts (agents.runtime.run_facts), in one plain statement
    # (claw_platform.raw_rows). Built on first use: the user model is settled by then.
    user = get_user_model()
    columns = f"{select_list(('s', Session), ('u', user), ('t', Turn))}, {facts_columns()}"
    return (
        f"SELECT {columns} FROM agents_session s "  # noqa: S608 (columns from the models)
        f"LEFT JOIN {user._meta.db_table} u ON u.id = s.user_id "
        "JOIN agents_turn t ON t.id = %(turn)s AND t.tenant_id = %(tenant)s "
        "WHERE s.id = %(session)s AND s.tenant_id = %(tenant)s"
    )


def _load(claim: Claim) -> tuple[Session, Turn, dict[str, bool], RunFacts]:
    # The agent comes from resolve_agent (cached), not from this row.
    with prepared_cursor() as cursor:
        cursor.execute(
            _load_sql(),
            {"session": claim.session_id, "turn": claim.turn_id, "tenant": claim.tenant_id},
        )
        row = cursor.fetchone()
    if row is None:
        raise Session.DoesNotExist(
            f"run {claim.run_id}: no session {claim.session_id} or turn {claim.turn_id}"
        )
    session, user, turn = instances(row[:-FACTS_COLUMNS], Session, get_user_model(), Turn)
    session.user = user
    # The session carries its facts to the run's tools factory (registry_tools).
    facts = facts_from(row[-FACTS_COLUMNS:])
    remember_facts(session, facts)
    if not claim.resume:
        return session, turn, {}, facts  # decisions exist only for a run that paused
    approvals = {
        call_id: status == ApprovalStatus.APPROVED
        for call_id, status in ApprovalRequest._base_manager.filter(run_id=claim.run_id)
        .exclude(status=ApprovalStatus.PENDING)
        .values_list("call_id", "status")
    }
    return session, turn, approvals, facts


async def _execute(claim: Claim, token: CancelToken, owner: str, ready: Callable[[], None]) -> str:
    """Run the claimed run to its end; ``ready`` is called once it is set up."""
    sink = RunEventSink(claim.run_id, claim.tenant_id, last_seq=claim.event_seq)
    sink.known_session(claim.session_id)
    try:
        async with traced_run(claim.run_id, claim.tenant_id, first_attempt=not claim.resume) as root:
            status = await _execute_with(claim, token, owner, sink, ready)
            root.set("claw.run.status", status)
            return status
    finally:
        await sink.drain()


async def _execute_with(
    claim: Claim, token: CancelToken, owner: str, sink: RunEventSink, ready: Callable[[], None]
) -> str:
    session, turn, approvals, facts = await db_async(_load)(claim)
    agent = cached_agent(session.agent_id, facts.agent_version)
    if agent is None:
        agent = await db_async(resolve_agent)(session.agent_id)
    describe_run(agent, session)
    if turn.state in (TurnState.COMPLETE, TurnState.FAILED):
        # The previous attempt finished the turn and died before closing the run:
        # close it now; running the loop again would answer the user twice.
        return await _close_finished_turn(claim, owner, turn, sink)
    if not agent.enabled:
        error = f"The agent {agent.name} is disabled."
        await sink.emit("run.failed", {"status": "failed", "error": error})
        await _settle(claim, owner, sink, RunStatus.FAILED, error)
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
            on_ready=ready,
        )
    except Exception as exc:
        if is_database_outage(exc):
            # Not the run's fault: it resumes from its last persisted step as soon
            # as the database answers again (here or on another worker).
            logger.warning("run %s lost the database (%s); handing it back", claim.run_id, exc)
            await _hand_back(claim, owner)
            return "handed back"
        logger.exception("run %s failed", claim.run_id)
        error = readable_failure(exc)
        if token.reason != "lease_lost":
            await sink.emit("run.failed", {"status": "failed", "error": error})
            await _settle(claim, owner, sink, RunStatus.FAILED, error)
        return RunStatus.FAILED
    if token.reason == "lease_lost":
        return "lease_lost"
    status = {"timed_out": RunStatus.FAILED}.get(reply.status, reply.status)
    error = (reply.turn.error if reply.turn else "") or ("timed out" if reply.status == "timed_out" else "")
    pending = list(reply.turn.pending_calls) if reply.turn else []
    if status == RunStatus.FAILED:
        logger.warning("run %s failed: %s", claim.run_id, error)
    await _settle(claim, owner, sink, status, error or "", pending, used[0] if used else None)
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
    await _settle(claim, owner, sink, status, turn.error)
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
    with system_bypass():  # a stopping worker hands back its runs, whatever their tenant
        released = Run._base_manager.filter(pk=run_id, lease_owner=owner, status=RunStatus.RUNNING).update(
            lease_expires_at=timezone.now() - timedelta(seconds=1)
        )
    if released:
        enqueue_run(run_id)


@functools.cache
def _finish_sql() -> str:
    # The run (locked) with its turn, when _settle_sql matched no row: is it still ours?
    columns = select_list(("r", Run), ("t", Turn))
    return (
        f"SELECT {columns} FROM agents_run r JOIN agents_turn t ON t.id = r.turn_id "  # noqa: S608
        "WHERE r.id = %(run)s AND r.lease_owner = %(owner)s AND r.status = %(running)s FOR UPDATE OF r"
    )


@functools.cache
def _settle_sql() -> str:
    # The run settled and returned with its turn, in one statement; no row when the
    # lease was lost, or when a run that would pause was stopped meanwhile (the
    # caller then looks at the row: _finish_sql). Its event counter takes in the
    # settling events stored next in the same transaction (RunEventSink.store_settling).
    columns = select_list(("r", Run), ("t", Turn))
    return (
        "UPDATE agents_run r SET status = %(status)s, error = %(error)s, finished_at = %(finished_at)s, "  # noqa: S608
        "lease_owner = '', lease_expires_at = NULL, cancel_requested = false, "
        "event_seq = greatest(r.event_seq, %(seq)s) "
        "FROM agents_turn t WHERE r.id = %(run)s AND r.lease_owner = %(owner)s AND r.status = %(running)s "
        f"AND t.id = r.turn_id AND NOT (%(paused)s AND r.cancel_requested) RETURNING {columns}"
    )


async def _settle(
    claim: Claim,
    owner: str,
    sink: RunEventSink,
    status: str,
    error: str,
    pending: list[Any] | None = None,
    tools: ToolExecutor | None = None,
) -> None:
    """Write the run's final status (or its pause), with its settling events."""
    if await db_async(_finish_run)(claim, owner, status, error, pending or [], tools, sink):
        sink.settled()


@transaction.atomic
def _finish_run(
    claim: Claim,
    owner: str,
    status: str,
    error: str,
    pending: list[Any],
    tools: ToolExecutor | None,
    sink: RunEventSink | None = None,
) -> bool:
    """Settle the run we hold: True once done, False if another worker holds it now.
    The ``sink``'s settling events are stored in the same transaction."""
    paused = status == RunStatus.AWAITING_APPROVAL
    settled = {
        "status": status,
        "error": error[:5000],
        "finished_at": None if paused else timezone.now(),
        "paused": paused,
        "seq": sink.settling_seq() if sink is not None else 0,
    }
    key = {"run": claim.run_id, "owner": owner, "running": RunStatus.RUNNING}
    with prepared_cursor() as cursor:
        cursor.execute(_settle_sql(), {**settled, **key})
        row = cursor.fetchone()
        if row is None:
            cursor.execute(_finish_sql(), key)
            locked = cursor.fetchone()
    if row is None:
        if locked is None:
            return False  # the lease was lost: the run is another worker's now
        # Still ours, so it was to pause for approval and was stopped meanwhile.
        run, run.turn = instances(locked, Run, Turn)
        finish_unstarted_run(run, RunStatus.CANCELLED, error="stopped by the user")
        if sink is not None:
            sink.drop_settling()
        return True
    run, run.turn = instances(row, Run, Turn)
    if sink is not None:
        sink.store_settling()
    # Waiting API calls answer from these rows (the turn was selected with the run).
    notify_run_settled(run.pk, settle_payload(run))
    if paused:
        ApprovalRequest._base_manager.bulk_create(
            [
                ApprovalRequest(
                    tenant_id=run.tenant_id,
                    run_id=run.pk,
                    call_id=p.call.id[:200],
                    tool_name=p.call.name[:200],
                    arguments=p.call.arguments,
                    risk=_call_risk(tools, p.call),
                    request_reason=p.reason,
                    details=getattr(p, "details", None) or {},
                )
                for p in pending
            ],
            ignore_conflicts=True,
        )
    return True


def _call_risk(tools: ToolExecutor | None, call: Any) -> str:
    """The risk an approval request shows: the policy's view of this very call (a
    chained shell command is high whatever the tool's usual risk), else the tool's."""
    if tools is None:
        return "medium"
    call_risk = getattr(tools, "call_risk", None)
    return str(call_risk(call)) if call_risk is not None else tools.traits(call.name).risk


# ------------------------------------------------------------------ sweeper


def sweep_runs(*, limit: int = 100) -> dict[str, int]:
    """Send back runs whose worker died (expired lease) and runs still waiting for a
    slot; end runs whose dead worker had been asked to cancel. Idempotent: it only
    enqueues, and claims are atomic."""
    with system_bypass():  # the sweeper looks at every tenant's runs
        return _sweep_runs(limit)


def _sweep_runs(limit: int) -> dict[str, int]:
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
