"""Over budget, every other kind of LLM call is refused too, and no LLM request goes
out: a heartbeat, a routine's run, a sub-agent (on its parent's budgets), a consulted
agent (on its own budget), compaction, its memory flush, a title and a message on the
chat socket. The chat, REST, webhook,
/v1/ and a run that runs out mid-way are in test_api.py; embeddings in
tests/memory/test_remote_embedder.py, the memory reflector in tests/memory/test_reflector.py.
Heartbeat calls are recorded as usage of purpose ``heartbeat``."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from agents.actions.config import do_save_agent_file
from agents.actions.conversation import do_create_session
from agents.actions.runs import do_send_message
from agents.budgets.models import Budget
from agents.budgets.scope import Charge, charging
from agents.engine.compaction import CompactionSettings
from agents.engine.interfaces import RunContext
from agents.engine.light import generate_title
from agents.engine.turn import TurnConfig, compact_session
from agents.engine.types import Message, Usage
from agents.models import ModelProfile, RoutineRun, Run, Session, UsageRecord
from agents.routines.heartbeat import NOTHING_FOUND
from agents.runtime.chat import handle_message
from agents.runtime.llm import close_providers, model_spec
from agents.runtime.resolution import resolve_agent
from agents.runtime.worker import execute_run
from claw_platform.api.live import settle_run
from tests.channels.conftest import open_socket
from tests.fakes.engine import FakeToolExecutor, InMemoryRunStore
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.routines.helpers import make_routine, tick

pytestmark = pytest.mark.django_db(transaction=True)


def spent_budget(ts) -> Budget:
    return Budget.objects.unscoped().create(
        tenant=ts.tenant, name="Spent", limit=Decimal("0.01"), spent=Decimal("0.01"), period="none"
    )


def model_requests(fake_llm) -> int:
    return len([r for r in fake_llm.requests if r.json.get("messages")])


def test_a_heartbeat_over_budget_is_refused_without_a_request(live_agent, fake_llm):
    spent_budget(live_agent)
    session = do_create_session(live_agent.agent, user=live_agent.member, title="hb")
    do_save_agent_file(
        live_agent.agent, "HEARTBEAT.md", "- check that the backups ran", user=live_agent.member
    )

    async def beat():
        try:
            return await handle_message(session.pk, "/heartbeat")
        finally:
            await close_providers()

    reply = asyncio.run(beat())
    assert "'Spent'" in reply.text, reply.text
    assert "Traceback" not in reply.text
    assert model_requests(fake_llm) == 0
    refused = UsageRecord.objects.unscoped().get(session=session)
    assert (refused.purpose, refused.cost) == ("heartbeat", 0)
    assert refused.error in ("budget_exceeded", "unpriced_model")


def test_a_routines_run_over_budget_fails_naming_the_budget_without_a_request(
    live_agent, inline_runs, fake_llm
):
    spent_budget(live_agent)
    now = datetime.now(UTC)
    routine = make_routine(live_agent, next_run_at=now, name="Digest")
    tick(now)
    row = RoutineRun._base_manager.get(routine=routine)
    assert row.run_id is not None
    settled = async_to_sync(settle_run)(row.run_id, deadline=time.monotonic() + 30)
    assert settled is not None
    assert settled.status == "failed"
    assert "'Spent'" in settled.error
    assert model_requests(fake_llm) == 0


def priced(ts, output: str = "1") -> None:
    """Give the fixture's model a price (it has none: unknown prices are refused
    under a money budget before any other check)."""
    profile = ModelProfile.objects.unscoped().get(pk=ts.model.pk)
    profile.input_price, profile.output_price = Decimal(0), Decimal(output)
    profile.save()  # bumps the agent's configuration version


def test_a_heartbeat_is_recorded_as_usage_linked_to_its_routine(live_agent, fake_llm):
    priced(live_agent, output="1000")
    session = do_create_session(live_agent.agent, user=live_agent.member, title="hb")
    do_save_agent_file(live_agent.agent, "HEARTBEAT.md", "- check the backups", user=live_agent.member)
    routine = make_routine(live_agent, next_run_at=datetime.now(UTC), name="Beat")
    fake_llm.script(FakeTurn(text="HEARTBEAT_OK", usage=Usage(input_tokens=40, output_tokens=3)))

    async def beat():
        try:
            # A heartbeat a routine runs: its usage names the routine (O1).
            with charging(Charge(tenant_id=live_agent.tenant.pk, routine_id=routine.pk)):
                return await handle_message(session.pk, "/heartbeat")
        finally:
            await close_providers()

    assert asyncio.run(beat()).text == NOTHING_FOUND
    row = UsageRecord.objects.unscoped().get(session=session)
    assert row.purpose == "heartbeat"
    assert (row.input_tokens, row.output_tokens, row.cost) == (40, 3, Decimal("0.003"))
    assert (row.agent_id, row.user_id, row.routine_id, row.error) == (
        live_agent.agent.pk,
        live_agent.member.pk,
        routine.pk,
        "",
    )


def test_a_sub_agent_is_refused_on_its_parents_budget(live_agent, fake_llm):
    # $0.001 an output token: a call's worst case (4,096 tokens) is $4.096.
    priced(live_agent, output="1000")
    Budget.objects.unscoped().create(
        tenant=live_agent.tenant, name="Parent agent", scope="agent", agent=live_agent.agent, limit=Decimal(5)
    )
    session = do_create_session(live_agent.agent, user=live_agent.member, title="research")
    # The parent's call spends $1 of the $5: the sub-agent's worst case no longer fits.
    fake_llm.script(
        FakeTurn(
            tool_calls=[("sub_agent", {"task": "Count the notes files"}, "call_sub")],
            usage=Usage(input_tokens=10, output_tokens=1000),
        )
    )
    run = do_send_message(session, "how many notes?", acting_user=live_agent.member)
    assert execute_run(run.pk, wait=True) == "failed"
    assert model_requests(fake_llm) == 1
    child = Session.objects.unscoped().get(parent=session)
    refused = UsageRecord.objects.unscoped().get(session=child)
    assert (refused.purpose, refused.error, refused.cost) == ("sub_agent", "budget_exceeded", 0)
    failed = Run.objects.unscoped().get(pk=run.pk)
    assert "'Parent agent'" in failed.error


def exhausted_model(ts):
    """The live agent's model (``model_spec`` puts it behind the budget guard, as for
    every call), with a spent budget on its tenant."""
    priced(ts)
    spent_budget(ts)
    return resolve_agent(ts.agent.pk).model


def charge(ts) -> Charge:
    return Charge(tenant_id=ts.tenant.pk, user_id=ts.member.pk, agent_ids=(ts.agent.pk,))


def compact(ts, *, memory_flush: bool) -> tuple[Any, InMemoryRunStore]:
    model = exhausted_model(ts)
    history = [m for i in range(4) for m in (Message.user(f"question {i}"), Message.assistant(f"answer {i}"))]
    store = InMemoryRunStore(history)

    async def go():
        try:
            with charging(charge(ts)):
                return await compact_session(
                    model=model_spec(model),
                    tools=FakeToolExecutor(),
                    store=store,
                    ctx=RunContext(tenant_id=str(ts.tenant.pk)),
                    prompt="sys",
                    config=TurnConfig(
                        memory_flush=memory_flush, compaction=CompactionSettings(keep_recent=2)
                    ),
                    strategy="summarize",
                )
        finally:
            await close_providers()

    return asyncio.run(go()), store


def test_compaction_is_refused_over_budget_and_keeps_the_history(live_agent, fake_llm):
    result, store = compact(live_agent, memory_flush=False)
    assert "'Spent'" in str(result.error)
    assert len(store.history) == 8
    assert [(u.purpose, u.error) for u in store.usage] == [("compaction", "budget_exceeded")]
    assert model_requests(fake_llm) == 0


def test_the_memory_flush_is_refused_over_budget(live_agent, fake_llm):
    _result, store = compact(live_agent, memory_flush=True)
    assert [(u.purpose, u.error) for u in store.usage] == [
        ("memory_flush", "budget_exceeded"),
        ("compaction", "budget_exceeded"),
    ]
    assert model_requests(fake_llm) == 0


def test_a_title_is_refused_over_budget_and_falls_back_to_the_first_words(live_agent, fake_llm):
    model = exhausted_model(live_agent)

    async def go():
        try:
            with charging(charge(live_agent)):
                return await generate_title("plan the team offsite in May", main=model_spec(model))
        finally:
            await close_providers()

    result = asyncio.run(go())
    assert result.title == "plan the team offsite in May"
    assert "'Spent'" in str(result.error)
    assert model_requests(fake_llm) == 0


async def test_a_message_on_the_chat_socket_over_budget_is_refused_readably(live_agent, fake_llm):
    await sync_to_async(spent_budget)(live_agent)
    session = await sync_to_async(do_create_session)(live_agent.agent, user=live_agent.member, title="x")
    socket, connected, _ = await open_socket(session.pk, live_agent.member)
    assert connected
    await socket.send_json_to({"type": "message", "text": "hello"})
    frame = await socket.receive_json_from(timeout=10)
    while frame["type"] != "error":
        frame = await socket.receive_json_from(timeout=10)
    assert "'Spent'" in frame["payload"]["message"]
    assert "resets" in frame["payload"]["message"] or "reset" in frame["payload"]["message"]
    await socket.disconnect()
    assert not await sync_to_async(Run.objects.unscoped().filter(session_id=session.pk).exists)()
    assert model_requests(fake_llm) == 0


def test_a_consulted_agent_is_refused_on_its_own_budget(live_agent, fake_llm):
    from tests.teams.conftest import link, make_agent

    ts = live_agent
    priced(ts)
    lawyer = make_agent(ts, "lawyer", "Lawyer", description="Answers contract questions.")
    link(ts.agent, lawyer, "consult", "Contract and licence questions.")
    Budget.objects.unscoped().create(
        tenant=ts.tenant,
        name="Lawyer",
        scope="agent",
        agent=lawyer,
        limit=Decimal("0.01"),
        spent=Decimal(1),
        period="none",
    )
    session = do_create_session(ts.agent, user=ts.member, title="licence")
    fake_llm.script(
        FakeTurn(
            tool_calls=[("delegate", {"action": "consult", "agent": "lawyer", "task": "MIT ok?"}, "c1")]
        ),
        FakeTurn(text="The lawyer could not answer."),
    )
    run = do_send_message(session, "can we use an MIT library?", acting_user=ts.member)
    assert execute_run(run.pk, wait=True) == "completed", fake_llm.problems()
    assert model_requests(fake_llm) == 2  # the parent's two calls; none for the lawyer
    child = Session.objects.unscoped().get(parent=session)
    refused = UsageRecord.objects.unscoped().get(session=child)
    assert (refused.agent_id, refused.error, refused.cost) == (lawyer.pk, "budget_exceeded", 0)
