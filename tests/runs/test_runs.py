"""Runs (R1-R4, S6, T5): queued on commit, claimed once, leased, resumed after a
crash, cancelled mid-stream, paused for approval, limited per tenant; the worker
task is called in-process here against the fake LLM over real HTTP."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.db import connection, transaction
from django.utils import timezone
from django_q.models import OrmQ

from agents.actions.runs import (
    access_approval,
    access_run,
    do_cancel_run,
    do_decide_approval,
    do_send_message,
)
from agents.engine.interfaces import StepRecord
from agents.engine.types import Message as EngineMessage
from agents.engine.types import TextPart, ToolCallPart
from agents.models import Agent, ApprovalRequest, ApprovalStatus, BusyPolicy, Message, Run, RunStatus, Turn
from agents.runtime.events import events_after
from agents.runtime.store import DjangoRunStore, TurnBinding
from agents.runtime.worker import claim_run, execute_run, shutdown_supervisor, supervisor, sweep_runs
from claw_platform.audit.models import AuditEvent
from claw_platform.tenancy.context import tenant_context
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.runs import tools as test_tools
from tests.runs.helpers import fresh, new_session, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def send(session, text, user):
    return do_send_message(session, text, acting_user=user)


def test_a_message_creates_its_turn_and_run_and_enqueues_only_on_commit(live_agent):
    session = new_session(live_agent)
    before = OrmQ.objects.count()
    runs_before = Run.objects.unscoped().count()

    def rolled_back() -> None:
        with transaction.atomic():
            send(session, "hello", live_agent.member)
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        rolled_back()
    assert OrmQ.objects.count() == before
    assert Run.objects.unscoped().count() == runs_before

    run = send(session, "hello", live_agent.member)
    assert run.status == RunStatus.QUEUED
    assert Turn.objects.unscoped().get(pk=run.turn_id).user_text == "hello"
    assert OrmQ.objects.count() == before + 1
    assert AuditEvent.objects.unscoped().filter(action="run.created", object_id=str(run.pk)).exists()


def test_a_run_records_the_agents_revision_at_its_message(live_agent):
    from agents.actions.revisions import do_record_agent_revision

    first = send(new_session(live_agent), "before the change", live_agent.member)
    before = fresh(first).agent_revision
    assert before is not None  # the agent's creation recorded one
    live_agent.agent.description = "changed"
    live_agent.agent.save()
    latest = do_record_agent_revision(live_agent.agent, acting_user=None)
    assert latest is not None
    assert latest.number == before + 1
    run = send(new_session(live_agent), "after it", live_agent.member)
    assert fresh(run).agent_revision == latest.number


def test_a_worker_completes_a_run_and_stores_numbered_events(live_agent, fake_llm):
    session = new_session(live_agent)
    fake_llm.script(FakeTurn(text="Hello from the worker."))
    run = send(session, "hi", live_agent.member)
    assert execute_run(run.pk, wait=True) == "completed"
    run = fresh(run)
    assert (run.status, run.attempt, run.lease_owner) == ("completed", 1, "")
    assert run.finished_at is not None
    events = events_after(run, 0)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.type for e in events[:2]] == ["run.queued", "run.started"]
    assert events[0].payload == {"turn": run.turn_id, "number": 1, "text": "hi", "user": "a_member"}
    assert events[-1].type == "run.completed"
    assert events[-1].payload["text"] == "Hello from the worker."
    assert "chunk" not in {e.type for e in events}
    assert [e.seq for e in events_after(run, 1)] == [e.seq for e in events[1:]]
    assert Turn.objects.unscoped().get(pk=run.turn_id).response_text == "Hello from the worker."


def test_two_claims_race_and_only_one_wins(live_agent):
    run = send(new_session(live_agent), "hi", live_agent.member)
    barrier = threading.Barrier(2)
    results: dict[str, object] = {}

    def claim(owner: str) -> None:
        try:
            barrier.wait()
            results[owner] = claim_run(run.pk, owner)
        finally:
            connection.close()

    threads = [threading.Thread(target=claim, args=(f"w{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [owner for owner, c in results.items() if c is not None]
    assert len(winners) == 1
    assert fresh(run).lease_owner == winners[0]


def test_an_expired_lease_is_reclaimed_and_resumes_without_rerunning_the_interrupted_call(
    live_agent, fake_llm, settings
):
    settings.CLAW_RUN_TOOLS_FACTORY = "tests.runs.tools.sink_tools"
    session = new_session(live_agent)
    run = send(session, "post a note", live_agent.member)
    assert claim_run(run.pk, "dead-worker") is not None
    # What the dead worker left: the user message and the pending step are stored,
    # the side-effecting call was started and never confirmed finished.
    turn = Turn.objects.unscoped().get(pk=run.turn_id)
    store = DjangoRunStore(
        TurnBinding(session.tenant_id, session.pk, turn.thread_id, turn.pk, session.agent_id, session.user_id)
    )
    call = ToolCallPart("call_post", "post_to_sink", {"url": "http://127.0.0.1:9/never"})
    assistant = EngineMessage("assistant", [TextPart("Posting."), call])
    asyncio.run(store.persist_step(StepRecord(0, [EngineMessage.user("post a note")], [], assistant)))
    asyncio.run(store.mark_tool_started(call, side_effects=True))
    Run.objects.unscoped().filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    fake_llm.script(FakeTurn(text="The post was interrupted; I did not repeat it."))
    assert execute_run(run.pk, wait=True) == "completed"
    run = fresh(run)
    assert run.attempt == 2
    assert test_tools.last["tools"].counts["post_to_sink"] == 0
    tool_messages = [m for m in fake_llm.requests[-1].json["messages"] if m.get("role") == "tool"]
    assert tool_messages
    assert "interrupt" in str(tool_messages[0]["content"]).lower()
    started = [e for e in events_after(run) if e.type == "run.started"]
    assert started[-1].payload.get("resumed") is True


def test_cancellation_mid_stream_ends_cancelled_with_the_partial_text_kept(live_agent, fake_llm):
    session = new_session(live_agent)
    fake_llm.script(FakeTurn(text="word " * 400, chunk_size=5, chunk_delay=0.03))
    run = send(session, "talk a lot", live_agent.member)
    claim = claim_run(run.pk, supervisor().owner)
    assert claim is not None
    future = supervisor().submit(claim)
    turn = Turn.objects.unscoped().filter(pk=run.turn_id)
    assert wait_for(lambda: "word" in (turn.values_list("partial_text", flat=True).first() or ""))
    started = time.monotonic()
    do_cancel_run(run, acting_user=live_agent.member)
    assert wait_for(lambda: fresh(run).status == RunStatus.CANCELLED, timeout=5)
    elapsed = time.monotonic() - started
    assert future.result(timeout=5) == "cancelled"
    # R3 asks for 1 s; the bound here leaves room for a loaded CI machine.
    assert elapsed < 2.0, elapsed
    kept = Message.objects.unscoped().filter(turn_id=run.turn_id, role="assistant").get()
    text = "".join(p.get("text", "") for p in kept.parts if p.get("type") == "text")
    assert text.startswith("word word")
    assert len(text) < len("word " * 400)
    assert events_after(run)[-1].type == "run.cancelled"


def _approval_run(live_agent, fake_llm, settings):
    settings.CLAW_RUN_TOOLS_FACTORY = "tests.runs.tools.approval_tools"
    fake_llm.script(FakeTurn(tool_calls=[("delete_file", {"path": "a.txt"}, "call_del")]))
    run = send(new_session(live_agent), "delete a.txt", live_agent.member)
    assert execute_run(run.pk, wait=True) == "awaiting_approval"
    run = fresh(run)
    assert run.status == RunStatus.AWAITING_APPROVAL
    approval = ApprovalRequest.objects.unscoped().get(run=run)
    assert (approval.call_id, approval.tool_name, approval.risk) == ("call_del", "delete_file", "high")
    assert approval.arguments == {"path": "a.txt"}
    assert "approval_needed" in [e.type for e in events_after(run)]
    return run, approval


def test_an_approved_call_resumes_the_run_which_completes(live_agent, fake_llm, settings):
    run, approval = _approval_run(live_agent, fake_llm, settings)
    do_decide_approval(approval, True, acting_user=live_agent.member)
    assert fresh(run).status == RunStatus.QUEUED
    fake_llm.script(FakeTurn(text="Deleted a.txt."))
    assert execute_run(run.pk, wait=True) == "completed"
    assert test_tools.last["tools"].counts["delete_file"] == 1
    # The task acted for the run's tenant only.
    ctx = test_tools.last["tools"].contexts[0]
    assert (ctx.tenant_id, ctx.run_id) == (str(live_agent.tenant.pk), str(run.pk))
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by_id) == (ApprovalStatus.APPROVED, live_agent.member.pk)
    assert (
        AuditEvent.objects.unscoped().filter(action="approval.decided", object_id=str(approval.pk)).exists()
    )


def test_a_denied_call_is_reported_to_the_model(live_agent, fake_llm, settings):
    run, approval = _approval_run(live_agent, fake_llm, settings)
    do_decide_approval(approval, False, acting_user=live_agent.member, reason="not that file")
    fake_llm.script(FakeTurn(text="Understood, I left it."))
    assert execute_run(run.pk, wait=True) == "completed"
    assert test_tools.last["tools"].counts["delete_file"] == 0
    tool_messages = [m for m in fake_llm.requests[-1].json["messages"] if m.get("role") == "tool"]
    assert "denied" in str(tool_messages[-1]["content"]).lower()


def test_the_per_tenant_limit_keeps_extra_runs_queued(live_agent, tenant_b, fake_llm, settings):
    settings.CLAW_RUNS_PER_TENANT = 1
    first = send(new_session(live_agent), "one", live_agent.member)
    second = send(new_session(live_agent), "two", live_agent.member)
    other = send(new_session(tenant_b), "elsewhere", tenant_b.member)
    assert claim_run(first.pk, "busy-worker") is not None
    assert execute_run(second.pk, wait=True) == "not claimed"
    assert fresh(second).status == RunStatus.QUEUED
    assert claim_run(other.pk, "other-worker") is not None  # tenant B has its own slot
    Run.objects.unscoped().filter(pk=first.pk).update(status=RunStatus.COMPLETED)
    fake_llm.script(FakeTurn(text="Second done."))
    assert execute_run(second.pk, wait=True) == "completed"


def test_queue_policy_runs_a_sessions_messages_one_at_a_time_in_order(live_agent, fake_llm):
    session = new_session(live_agent)
    first = send(session, "one", live_agent.member)
    second = send(session, "two", live_agent.member)
    assert claim_run(second.pk, "w") is None  # the older message goes first
    fake_llm.script(FakeTurn(text="First."), FakeTurn(text="Second."))
    assert execute_run(first.pk, wait=True) == "completed"
    assert execute_run(second.pk, wait=True) == "completed"
    roles = list(
        Message.objects.unscoped().filter(session=session).order_by("seq").values_list("role", "turn_id")
    )
    assert roles == [
        ("user", first.turn_id),
        ("assistant", first.turn_id),
        ("user", second.turn_id),
        ("assistant", second.turn_id),
    ]
    # The second turn's undo checkpoint was moved past the first run's messages when
    # it was claimed: undoing it hides only its own two messages.
    from agents.actions.conversation import do_undo
    from agents.models import MessageState, Session

    do_undo(Session.objects.unscoped().get(pk=session.pk))
    active = Message.objects.unscoped().filter(session=session, state=MessageState.ACTIVE)
    assert sorted(active.values_list("turn_id", flat=True)) == [first.turn_id, first.turn_id]


def test_interrupt_policy_cancels_the_active_run(live_agent):
    Agent.objects.unscoped().filter(pk=live_agent.agent.pk).update(busy_policy=BusyPolicy.INTERRUPT)
    session = new_session(live_agent)
    queued = send(session, "one", live_agent.member)
    running = send(session, "two", live_agent.member)
    assert fresh(queued).status == RunStatus.CANCELLED
    assert events_after(queued)[-1].type == "run.cancelled"
    assert claim_run(running.pk, "w") is not None
    newest = send(session, "three", live_agent.member)
    assert fresh(running).cancel_requested
    assert fresh(newest).status == RunStatus.QUEUED


def test_a_stop_message_cancels_the_sessions_run_instead_of_starting_a_turn(live_agent):
    session = new_session(live_agent)
    run = send(session, "one", live_agent.member)
    turns = Turn.objects.unscoped().filter(session=session).count()
    stopped = send(session, "/stop", live_agent.member)
    assert stopped is not None
    assert stopped.pk == run.pk
    assert fresh(run).status == RunStatus.CANCELLED
    assert Turn.objects.unscoped().filter(session=session).count() == turns
    assert send(session, "/stop", live_agent.member) is None


def test_another_tenant_cannot_see_cancel_or_decide_a_run(live_agent, tenant_b, outsider):
    run = send(new_session(live_agent), "one", live_agent.member)
    Run.objects.unscoped().filter(pk=run.pk).update(status=RunStatus.AWAITING_APPROVAL)
    approval = ApprovalRequest.objects.unscoped().create(
        tenant=live_agent.tenant, run=run, call_id="c1", tool_name="delete_file"
    )
    with tenant_context(tenant_b.tenant):
        with pytest.raises(Run.DoesNotExist):
            access_run(tenant_b.owner, run.pk)
        with pytest.raises(ApprovalRequest.DoesNotExist):
            access_approval(tenant_b.owner, approval.pk)
    with tenant_context(live_agent.tenant):
        with pytest.raises(Run.DoesNotExist):
            access_run(outsider, run.pk)
        assert access_run(live_agent.member, run.pk).pk == run.pk
    for intruder in (tenant_b.owner, outsider, live_agent.viewer):
        with pytest.raises(PermissionDenied):
            do_cancel_run(run, acting_user=intruder)
        with pytest.raises(PermissionDenied):
            do_decide_approval(approval, True, acting_user=intruder)
    assert fresh(run).status == RunStatus.AWAITING_APPROVAL
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING


def test_the_sweeper_sends_back_expired_runs_and_ends_dead_cancelled_ones(live_agent, settings):
    settings.CLAW_RUN_SWEEP_SECONDS = 1
    expired = send(new_session(live_agent), "one", live_agent.member)
    doomed = send(new_session(live_agent), "two", live_agent.member)
    for run in (expired, doomed):
        assert claim_run(run.pk, "dead") is not None
    past = timezone.now() - timedelta(seconds=5)
    Run.objects.unscoped().filter(pk__in=[expired.pk, doomed.pk]).update(lease_expires_at=past)
    Run.objects.unscoped().filter(pk=doomed.pk).update(cancel_requested=True)
    OrmQ.objects.all().delete()
    assert sweep_runs() == {"cancelled": 1, "expired": 1, "waiting": 0}
    assert OrmQ.objects.count() == 1  # the expired run goes back to the queue
    assert fresh(doomed).status == RunStatus.CANCELLED
    assert fresh(expired).status == RunStatus.RUNNING  # claimable again by any worker


def test_a_lost_database_hands_the_run_back_and_it_resumes_to_the_end(live_agent, fake_llm, monkeypatch):
    from django.db import OperationalError

    from agents.runtime import store as store_module

    session = new_session(live_agent)
    run = send(session, "hello", live_agent.member)
    real = store_module.DjangoRunStore._persist_step
    failures = {"left": 1}

    def flaky(self, step):
        if failures["left"]:
            failures["left"] -= 1
            raise OperationalError("server closed the connection unexpectedly")
        return real(self, step)

    monkeypatch.setattr(store_module.DjangoRunStore, "_persist_step", flaky)
    fake_llm.script(FakeTurn(text="First try, never stored."), FakeTurn(text="Hello after the outage."))
    assert execute_run(run.pk, wait=True) == "handed back"
    handed = fresh(run)
    # Still the run's to finish: not failed, its lease released, back in the queue.
    assert handed.status == RunStatus.RUNNING
    assert handed.lease_expires_at < timezone.now()
    assert Turn.objects.unscoped().get(pk=run.turn_id).state == "running"
    assert not [e for e in events_after(handed) if e.type == "run.failed"]

    assert execute_run(run.pk, wait=True) == "completed"
    done = fresh(run)
    assert (done.status, done.attempt) == (RunStatus.COMPLETED, 2)
    assert Turn.objects.unscoped().get(pk=run.turn_id).response_text == "Hello after the outage."


def test_a_run_whose_turn_already_finished_is_closed_without_asking_the_model_again(live_agent, fake_llm):
    session = new_session(live_agent)
    fake_llm.script(FakeTurn(text="Answered once."))
    run = send(session, "hello", live_agent.member)
    assert execute_run(run.pk, wait=True) == "completed"
    # As if the worker died after finishing the turn and before closing the run.
    Run.objects.unscoped().filter(pk=run.pk).update(
        status=RunStatus.RUNNING, lease_owner="dead", lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert execute_run(run.pk, wait=True) == "completed"  # no scripted turn left: no LLM call
    assert fresh(run).status == RunStatus.COMPLETED
    assert [e.type for e in events_after(run)].count("run.completed") == 1


def test_a_burst_of_runs_is_set_up_a_few_at_a_time_and_every_run_completes(live_agent, fake_llm, settings):
    settings.CLAW_RUN_TOOLS_FACTORY = "tests.runs.tools.slow_setup_tools"
    settings.CLAW_RUN_SETUPS = 2
    shutdown_supervisor()  # the next supervisor takes the setting
    test_tools.setups.update(now=0, most=0)
    runs = [send(new_session(live_agent), f"burst {n}", live_agent.member) for n in range(5)]
    fake_llm.script(*(FakeTurn(text=f"Answer {n}.") for n in range(5)))
    futures = [supervisor().submit(claim_run(run.pk, supervisor().owner)) for run in runs]
    assert [f.result(timeout=30) for f in futures] == ["completed"] * 5
    assert test_tools.setups["most"] == 2


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_runs_are_driven_on_the_configured_event_loop(live_agent, fake_llm, settings, loop):
    import uvloop

    settings.CLAW_RUN_LOOP = loop
    shutdown_supervisor()  # the next supervisor takes the setting
    try:
        assert isinstance(supervisor().loop, uvloop.Loop) is (loop == "uvloop")
        fake_llm.script(FakeTurn(text="On this loop."))
        run = send(new_session(live_agent), "hello", live_agent.member)
        future = supervisor().submit(claim_run(run.pk, supervisor().owner))
        assert future.result(timeout=30) == "completed"
        assert events_after(fresh(run), 0)[-1].payload["text"] == "On this loop."
    finally:
        shutdown_supervisor()


def test_a_stopped_worker_leaves_no_task_and_no_layer_pool_on_its_loop(live_agent, fake_llm):
    # A pending task would be destroyed later, logging a traceback in whatever
    # thread collects it (see worker._release_loop).
    from channels.layers import get_channel_layer

    fake_llm.script(FakeTurn(text="Relayed."))
    run = send(new_session(live_agent), "hello", live_agent.member)
    assert execute_run(run.pk, wait=True) == "completed"
    loop = supervisor().loop
    pools = get_channel_layer().django_db._pools
    assert loop in pools  # the run's events went through the layer from this loop
    shutdown_supervisor()
    assert loop.is_closed()
    assert asyncio.all_tasks(loop) == set()
    assert loop not in pools


def test_a_run_reads_the_tenants_extensions_once_and_its_hooks_apply(
    live_agent, fake_llm, monkeypatch, settings
):
    # The tools and the hooks of a run come from one read of the tenant's extensions.
    from tools_app.actions.extensions import do_create_hook
    from tools_app.runtime import config

    settings.CLAW_HOOK_CALLABLES = ["tests.tools.hook_callables.block_everything"]
    do_create_hook(
        live_agent.tenant,
        name="no-entry",
        event="on_message_received",
        kind="python",
        callable="tests.tools.hook_callables.block_everything",
        acting_user=live_agent.owner,
    )
    reads: list[int] = []
    real = config.extensions_version

    def counted(tenant_id: int) -> int:
        reads.append(tenant_id)
        return real(tenant_id)

    monkeypatch.setattr(config, "extensions_version", counted)
    settings.CLAW_RUN_TOOLS_FACTORY = "agents.runtime.tools.registry_tools"
    run = send(new_session(live_agent), "hello", live_agent.member)
    requests_before = len(fake_llm.requests)
    outcome = execute_run(run.pk, wait=True)
    assert reads == [live_agent.tenant.pk]
    # The hook ran: the message was blocked before any model call.
    assert len(fake_llm.requests) == requests_before
    assert outcome == "completed"
    assert events_after(run)[-1].payload["delivered"] is False
