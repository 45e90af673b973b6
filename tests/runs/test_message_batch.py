"""Messages in batches (agents.actions.message_batch): what each message gets is what
``do_send_message`` gives it, row for row; tenants, approvals, interrupts, ``/stop``
and a failed batch keep their meaning; the socket path groups waiting messages."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from agents.actions import message_batch
from agents.actions.message_batch import MessageRequest, do_send_messages
from agents.actions.runs import RUN_NOTIFY_CHANNEL, RUNS_TASK, AgentDisabled, do_send_message
from agents.models import (
    Agent,
    ApprovalRequest,
    ApprovalStatus,
    BusyPolicy,
    Checkpoint,
    Run,
    RunEvent,
    RunStatus,
    Session,
    Thread,
    Turn,
)
from agents.runtime.worker import claim_run, execute_run, execute_runs, supervisor
from channels_app import write_slots
from claw_platform.audit.models import AuditEvent
from claw_platform.db import listen_connection_params
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.runs.helpers import fresh, new_session, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def rows_of(run: Run) -> dict:
    """Everything a message wrote, without ids and times."""
    run = fresh(run)
    turn = Turn.objects.unscoped().get(pk=run.turn_id)
    thread = Thread.objects.unscoped().get(pk=turn.thread_id)
    (event,) = RunEvent.objects.unscoped().filter(run_id=run.pk)
    (audit,) = AuditEvent.objects.unscoped().filter(action="run.created", object_id=str(run.pk))
    payload = dict(event.payload)
    assert payload.pop("turn") == turn.pk
    diff = dict(audit.diff)
    assert diff.pop("turn") == [None, turn.pk]
    assert diff.pop("session") == [None, str(run.session_id)]
    assert audit.object_repr == f"Run {run.pk} (queued)"
    return {
        "run": (
            run.tenant_id,
            run.agent_id,
            run.agent_revision,
            run.requested_by_id,
            run.status,
            run.attempt,
        ),
        "run_seq": run.event_seq,
        "turn": (turn.tenant_id, turn.number, turn.state, turn.user_text, turn.started_at is not None),
        "thread": (thread.state, thread.turn_count),
        "checkpoints": list(
            Checkpoint.objects.unscoped()
            .filter(thread_id=thread.pk)
            .values_list("tenant_id", "number", "message_seq", "undone")
        ),
        "event": (event.tenant_id, event.seq, event.type, payload),
        "audit": (audit.tenant_id, audit.actor_id, audit.actor_label, audit.object_type, diff),
        "task": OrmQ.objects.filter(payload__isnull=False).count() > 0,
    }


def test_a_batch_writes_what_one_message_at_a_time_writes(live_agent, tenant_b):
    alone = [new_session(live_agent), new_session(tenant_b)]
    together = [new_session(live_agent), new_session(tenant_b)]
    users = [live_agent.member, tenant_b.member]
    expected = [
        rows_of(do_send_message(s, "hello", acting_user=u)) for s, u in zip(alone, users, strict=True)
    ]
    tasks = OrmQ.objects.count()
    results = do_send_messages([MessageRequest(s, "hello", u) for s, u in zip(together, users, strict=True)])
    assert all(isinstance(run, Run) for run in results)
    assert [rows_of(run) for run in results] == expected
    # One django-q2 task delivers the batch's runs.
    assert OrmQ.objects.count() == tasks + 1
    task = SignedPackage.loads(OrmQ.objects.order_by("-id").first().payload)
    assert (task["func"], task["args"], task["save"]) == (RUNS_TASK, ([r.pk for r in results],), False)
    assert [run.session_id for run in results] == [s.pk for s in together]
    stored = fresh(results[1])
    assert (results[1].pk, results[1].turn_id, results[1].tenant_id) == (
        stored.pk,
        stored.turn_id,
        stored.tenant_id,
    )


def test_the_batch_is_one_notification_and_the_worker_claims_every_run(live_agent):
    sessions = [new_session(live_agent) for _ in range(3)]
    with psycopg.connect(**listen_connection_params(), autocommit=True) as listener:
        listener.execute(f"LISTEN {RUN_NOTIFY_CHANNEL}")
        runs = do_send_messages([MessageRequest(s, "hi", live_agent.member) for s in sessions])
        notes = [note.payload for note in listener.notifies(timeout=2, stop_after=1)]
    assert notes == [",".join(str(run.pk) for run in runs)]
    assert [claim_run(run.pk, "w") is not None for run in runs] == [True, True, True]


def test_the_batch_task_starts_the_runs_nobody_claimed(live_agent, fake_llm):
    # The durable path, when no worker listened for the NOTIFY.
    sessions = [new_session(live_agent) for _ in range(3)]
    runs = do_send_messages([MessageRequest(s, "hi", live_agent.member) for s in sessions])
    fake_llm.script(*(FakeTurn(text="Hello.") for _ in runs))
    assert execute_runs([run.pk for run in runs]) == "0 running here, 3 started"
    assert execute_runs([run.pk for run in runs]) in {
        "3 running here, none started",
        "0 running here, 0 started",
    }
    wait_for(lambda: not supervisor().busy, timeout=20)
    assert [fresh(run).status for run in runs] == [RunStatus.COMPLETED] * 3


def test_another_tenants_session_and_a_non_member_get_nothing(live_agent, tenant_b, outsider):
    mine = new_session(live_agent)
    theirs = new_session(tenant_b)
    runs_before = Run.objects.unscoped().count()
    results = do_send_messages(
        [
            # Tenant A's member names tenant B's session as if it were tenant A's.
            MessageRequest(Session(pk=theirs.pk, tenant_id=live_agent.tenant.pk), "peek", live_agent.member),
            MessageRequest(theirs, "peek", outsider),
            MessageRequest(mine, "mine", live_agent.member),
            # Tenant B's own message to the same session, in the same batch.
            MessageRequest(theirs, "theirs", tenant_b.member),
            # A viewer reads but does not send; tenant B's member has no role in A.
            MessageRequest(mine, "viewer", live_agent.viewer),
            MessageRequest(mine, "wrong tenant", tenant_b.member),
        ]
    )
    assert isinstance(results[4], PermissionDenied)
    assert isinstance(results[5], PermissionDenied)
    assert isinstance(results[0], Session.DoesNotExist)
    assert isinstance(results[1], PermissionDenied)
    assert isinstance(results[2], Run)
    assert isinstance(results[3], Run)
    assert results[3].tenant_id == tenant_b.tenant.pk
    assert Run.objects.unscoped().count() == runs_before + 2
    assert list(Turn.objects.unscoped().filter(session_id=mine.pk).values_list("user_text", flat=True)) == [
        "mine"
    ]
    assert list(Turn.objects.unscoped().filter(session_id=theirs.pk).values_list("user_text", flat=True)) == [
        "theirs"
    ]


def test_two_messages_of_one_session_queue_in_order(live_agent, fake_llm):
    session = new_session(live_agent)
    first, second = do_send_messages(
        [MessageRequest(session, "one", live_agent.member), MessageRequest(session, "two", live_agent.member)]
    )
    assert isinstance(first, Run)
    assert isinstance(second, Run)
    turns = [Turn.objects.unscoped().get(pk=r.turn_id) for r in (first, second)]
    assert [(t.number, t.user_text) for t in turns] == [(1, "one"), (2, "two")]
    assert claim_run(second.pk, "w") is None  # the older message goes first
    fake_llm.script(FakeTurn(text="First."), FakeTurn(text="Second."))
    assert execute_run(first.pk, wait=True) == "completed"
    assert execute_run(second.pk, wait=True) == "completed"


def test_stop_interrupt_and_a_disabled_agent_keep_their_meaning(live_agent, tenant_b):
    running_session = new_session(live_agent)
    running = do_send_message(running_session, "long job", acting_user=live_agent.member)
    assert claim_run(running.pk, "w") is not None
    Agent.objects.unscoped().filter(pk=tenant_b.agent.pk).update(busy_policy=BusyPolicy.INTERRUPT)
    interrupted_session = new_session(tenant_b)
    queued = do_send_message(interrupted_session, "first", acting_user=tenant_b.member)
    idle = new_session(live_agent)
    stop, newer, off = do_send_messages(
        [
            MessageRequest(running_session, "/stop", live_agent.member),
            MessageRequest(interrupted_session, "second", tenant_b.member),
            MessageRequest(idle, "anyone?", live_agent.member, require_enabled=True),
        ]
    )
    assert isinstance(stop, Run)
    assert stop.pk == running.pk
    assert fresh(running).cancel_requested
    assert isinstance(newer, Run)
    assert fresh(queued).status == RunStatus.CANCELLED
    assert fresh(newer).status == RunStatus.QUEUED
    assert isinstance(off, Run)  # enabled: sent
    Agent.objects.unscoped().filter(pk=live_agent.agent.pk).update(enabled=False)
    (refused,) = do_send_messages([MessageRequest(idle, "now?", live_agent.member, require_enabled=True)])
    assert isinstance(refused, AgentDisabled)


def test_a_reply_to_a_run_awaiting_approval_decides_it(live_agent, fake_llm, settings):
    settings.CLAW_RUN_TOOLS_FACTORY = "tests.runs.tools.approval_tools"
    fake_llm.script(FakeTurn(tool_calls=[("delete_file", {"path": "a.txt"}, "call_del")]))
    session = new_session(live_agent)
    run = do_send_message(session, "delete a.txt", acting_user=live_agent.member)
    assert execute_run(run.pk, wait=True) == "awaiting_approval"
    other = new_session(live_agent)
    reply, elsewhere = do_send_messages(
        [
            MessageRequest(session, "approve", live_agent.member),
            MessageRequest(other, "hi", live_agent.member),
        ]
    )
    assert isinstance(reply, Run)
    assert reply.pk == run.pk
    assert ApprovalRequest.objects.unscoped().get(run=run).status == ApprovalStatus.APPROVED
    assert fresh(run).status == RunStatus.QUEUED
    assert isinstance(elsewhere, Run)


def test_a_failed_batch_sends_every_message_on_its_own(live_agent, monkeypatch):
    sessions = [new_session(live_agent) for _ in range(3)]

    def broken(*args, **kwargs):
        raise DatabaseError("the batch statement failed")

    monkeypatch.setattr(message_batch, "_create_runs", broken)
    results = do_send_messages([MessageRequest(s, "hi", live_agent.member) for s in sessions])
    assert all(isinstance(run, Run) for run in results)
    assert [fresh(run).status for run in results] == [RunStatus.QUEUED] * 3
    assert [Turn.objects.unscoped().filter(session_id=s.pk).count() for s in sessions] == [1, 1, 1]


def test_messages_waiting_for_a_write_slot_are_written_together(live_agent, settings, monkeypatch):
    settings.CLAW_SOCKET_WRITES = 1
    sessions = [new_session(live_agent) for _ in range(12)]
    batches: list[int] = []
    real = write_slots.do_send_messages

    def counting(requests):
        batches.append(len(requests))
        return real(requests)

    monkeypatch.setattr(write_slots, "do_send_messages", counting)

    async def send_all():
        return await asyncio.gather(
            *(write_slots.send_message(MessageRequest(s, "hi", live_agent.member)) for s in sessions),
            write_slots.send_message(MessageRequest(sessions[0], "/help", live_agent.member)),
            return_exceptions=True,
        )

    results = asyncio.run(send_all())
    assert all(isinstance(run, Run) for run in results[:12])
    assert [run.session_id for run in results[:12]] == [s.pk for s in sessions]
    assert isinstance(results[12], ValueError)  # a command is answered elsewhere, not queued
    assert sum(batches) == 13
    assert batches[0] == 1  # the first message did not wait
    assert len(batches) < 13  # the others were written together


def test_with_another_broker_the_batch_task_goes_through_it(live_agent, monkeypatch):
    from agents.actions import runs as run_actions

    class Collecting:
        list_key = "elsewhere"

        def __init__(self):
            self.packages = []

        def enqueue(self, package):
            self.packages.append(package)
            return len(self.packages)

    broker = Collecting()
    monkeypatch.setattr(run_actions, "_run_broker", lambda: broker)
    sessions = [new_session(live_agent) for _ in range(2)]
    tasks = OrmQ.objects.count()
    runs = do_send_messages([MessageRequest(s, "hi", live_agent.member) for s in sessions])
    assert OrmQ.objects.count() == tasks
    (package,) = broker.packages
    assert SignedPackage.loads(package)["args"] == ([run.pk for run in runs],)
