"""G5 and U1: an agent consults another (a child run of that agent, its answer as the
tool result, its cost charged to the parent run) or hands the chat over (the session
continues with the other agent, a stored ``handoff`` event). Cycles, over-deep
chains, agents of other tenants and agents nobody listed are refused."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from agents.actions.conversation import do_create_session
from agents.actions.runs import do_send_message
from agents.models import AgentDelegation, ModelProfile, RunEvent, Session, UsageRecord
from agents.runtime.worker import execute_run
from claw_platform.tenancy.models import Membership, Role
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.teams.conftest import link, make_agent

pytestmark = pytest.mark.django_db(transaction=True)


def tool_names(request) -> set[str]:
    return {t["function"]["name"] for t in request.json.get("tools") or []}


def last_tool_result(request) -> str:
    return [m for m in request.json["messages"] if m.get("role") == "tool"][-1]["content"]


def system_of(request) -> str:
    return request.json["messages"][0]["content"]


def priced(ts) -> None:
    # 10 tokens in, 5 out per fake call: $0.02 a call at these prices.
    profile = ModelProfile.objects.unscoped().get(pk=ts.model.pk)
    profile.input_price, profile.output_price = Decimal(1000), Decimal(2000)
    profile.save()


def test_a_consult_returns_the_other_agents_answer_and_charges_its_cost_to_the_parent(live_agent, fake_llm):
    ts = live_agent
    priced(ts)
    lawyer = make_agent(ts, "lawyer", "Lawyer", description="Answers contract questions.")
    link(ts.agent, lawyer, "consult", "Contract and licence questions.")
    session = do_create_session(ts.agent, user=ts.member, title="licence")
    fake_llm.script(
        FakeTurn(
            tool_calls=[("delegate", {"action": "consult", "agent": "lawyer", "task": "Is MIT ok?"}, "c1")]
        ),
        FakeTurn(text="Yes, MIT is permissive."),
        FakeTurn(text="The lawyer says MIT is fine."),
    )
    run = do_send_message(session, "can we use an MIT library?", acting_user=ts.member)
    assert execute_run(run.pk, wait=True) == "completed", fake_llm.problems()
    parent_request, child_request, final_request = fake_llm.requests
    assert "delegate" in tool_names(parent_request)
    assert "Lawyer (lawyer)" in system_of(parent_request)
    assert "Contract and licence" in system_of(parent_request)
    # The consulted agent runs with its own prompt (its SOUL.md), sees only the task.
    assert "You are Lawyer." in system_of(child_request)
    assert "Is MIT ok?" in str(child_request.json["messages"])
    assert "can we use an MIT library" not in str(child_request.json["messages"])
    assert "MIT is permissive" in last_tool_result(final_request)
    child = Session.objects.unscoped().get(parent=session)
    assert (child.agent_id, child.depth, child.user_id, child.channel) == (
        lawyer.pk,
        1,
        ts.member.pk,
        "delegate",
    )
    # Its call is charged to the parent run (usage row linked) and the parent's session.
    child_usage = UsageRecord.objects.unscoped().get(session=child)
    assert child_usage.parent_run_id == run.pk
    assert child_usage.agent_id == lawyer.pk
    assert Session.objects.unscoped().get(pk=session.pk).cost == Decimal("0.06")
    run.refresh_from_db()
    completed = RunEvent.objects.unscoped().get(run=run, type="run.completed")
    assert Decimal(str(completed.payload["cost"])) == Decimal("0.06")


def test_a_handoff_moves_the_session_to_the_other_agent_and_emits_handoff(live_agent, fake_llm):
    ts = live_agent
    billing = make_agent(ts, "billing", "Billing desk")
    link(ts.agent, billing, "handoff")
    session = do_create_session(ts.agent, user=ts.member, title="invoice")
    fake_llm.script(
        FakeTurn(
            tool_calls=[
                ("delegate", {"action": "handoff", "agent": "billing", "reason": "invoice question"}, "h")
            ]
        ),
        FakeTurn(text="Billing will take it from here."),
        FakeTurn(text="Billing here: your invoice is paid."),
    )
    run = do_send_message(session, "where is my invoice?", acting_user=ts.member)
    assert execute_run(run.pk, wait=True) == "completed", fake_llm.problems()
    session.refresh_from_db()
    assert (session.agent_id, session.handed_off_from_id) == (billing.pk, ts.agent.pk)
    event = RunEvent.objects.unscoped().get(run=run, type="handoff")
    assert event.payload["from"] == "assistant"
    assert event.payload["to"] == "billing"
    assert event.payload["reason"] == "invoice question"
    # The next message runs with the billing agent's prompt.
    second = do_send_message(session, "and the next one?", acting_user=ts.member)
    assert second.agent_id == billing.pk
    assert execute_run(second.pk, wait=True) == "completed", fake_llm.problems()
    assert "You are Billing desk." in system_of(fake_llm.requests[-1])
    # Billing lists nobody, but may hand the chat back to the agent that handed it over.
    assert "delegate" in tool_names(fake_llm.requests[-1])


def test_a_cycle_is_refused(live_agent, fake_llm):
    ts = live_agent
    other = make_agent(ts, "other", "Other")
    link(ts.agent, other, "consult")
    link(other, ts.agent, "consult")
    session = do_create_session(ts.agent, user=ts.member, title="loop")
    fake_llm.script(
        FakeTurn(
            tool_calls=[("delegate", {"action": "consult", "agent": "other", "task": "ask back"}, "c1")]
        ),
        FakeTurn(
            tool_calls=[("delegate", {"action": "consult", "agent": "assistant", "task": "again"}, "c2")]
        ),
        FakeTurn(text="I could not ask back."),
        FakeTurn(text="Done."),
    )
    run = do_send_message(session, "go", acting_user=ts.member)
    assert execute_run(run.pk, wait=True) == "completed", fake_llm.problems()
    assert "cycle" in last_tool_result(fake_llm.requests[2])
    assert Session.objects.unscoped().filter(parent__parent=session).count() == 0


def test_an_over_deep_chain_is_refused(live_agent, fake_llm):
    ts = live_agent
    second = make_agent(ts, "second", "Second")
    third = make_agent(ts, "third", "Third")
    fourth = make_agent(ts, "fourth", "Fourth")
    link(ts.agent, second, "consult")
    link(second, third, "consult")
    link(third, fourth, "consult")
    session = do_create_session(ts.agent, user=ts.member, title="deep")
    fake_llm.script(
        FakeTurn(tool_calls=[("delegate", {"action": "consult", "agent": "second", "task": "t2"}, "c1")]),
        FakeTurn(tool_calls=[("delegate", {"action": "consult", "agent": "third", "task": "t3"}, "c2")]),
        FakeTurn(tool_calls=[("delegate", {"action": "consult", "agent": "fourth", "task": "t4"}, "c3")]),
        FakeTurn(text="third: too deep"),
        FakeTurn(text="second: done"),
        FakeTurn(text="main: done"),
    )
    run = do_send_message(session, "go deep", acting_user=ts.member)
    assert execute_run(run.pk, wait=True) == "completed", fake_llm.problems()
    assert "at most 2 deep" in last_tool_result(fake_llm.requests[3])
    assert not Session.objects.unscoped().filter(agent=fourth).exists()
    assert Session.objects.unscoped().filter(agent=third, depth=2).exists()


def test_only_listed_agents_of_the_same_tenant_can_be_reached(live_agent, tenant_b, fake_llm):
    ts = live_agent
    stranger = make_agent(ts, "stranger", "Stranger")
    helper = make_agent(ts, "helper", "Helper")
    link(ts.agent, helper, "consult")
    # Another tenant's agent cannot be linked, even by id.
    with pytest.raises(ValidationError):
        AgentDelegation(tenant=ts.tenant, agent=ts.agent, target=tenant_b.agent).full_clean()
    with pytest.raises(ValidationError):
        AgentDelegation(tenant=ts.tenant, agent=ts.agent, target=ts.agent).full_clean()
    session = do_create_session(ts.agent, user=ts.member, title="reach")
    fake_llm.script(
        FakeTurn(tool_calls=[("delegate", {"action": "consult", "agent": "stranger", "task": "x"}, "c1")]),
        FakeTurn(tool_calls=[("delegate", {"action": "consult", "agent": "assistant", "task": "x"}, "c2")]),
        FakeTurn(tool_calls=[("delegate", {"action": "handoff", "agent": "helper"}, "c3")]),
        FakeTurn(text="Nobody to ask."),
    )
    run = do_send_message(session, "ask around", acting_user=ts.member)
    assert execute_run(run.pk, wait=True) == "completed", fake_llm.problems()
    assert "not an agent you may delegate to" in last_tool_result(fake_llm.requests[1])
    assert "You may use: helper" in last_tool_result(fake_llm.requests[1])
    assert "not an agent you may delegate to" in last_tool_result(fake_llm.requests[2])
    assert "not hand the chat over" in last_tool_result(fake_llm.requests[3])
    assert not Session.objects.unscoped().filter(parent=session).exists()
    session.refresh_from_db()
    assert session.agent_id == ts.agent.pk
    assert stranger.pk  # exists, but was never listed


def test_a_viewer_run_cannot_delegate_and_an_agent_without_a_team_has_no_delegate_tool(live_agent, fake_llm):
    ts = live_agent
    helper = make_agent(ts, "helper", "Helper")
    session = do_create_session(ts.agent, user=ts.member, title="plain")
    fake_llm.script(FakeTurn(text="hi"))
    run = do_send_message(session, "hello", acting_user=ts.member)
    assert execute_run(run.pk, wait=True) == "completed", fake_llm.problems()
    assert "delegate" not in tool_names(fake_llm.requests[0])
    assert "Delegation" not in system_of(fake_llm.requests[0])
    # The member becomes a viewer while their chat's run goes on: no delegation.
    link(ts.agent, helper, "consult")
    fake_llm.script(
        FakeTurn(tool_calls=[("delegate", {"action": "consult", "agent": "helper", "task": "x"}, "c1")]),
        FakeTurn(text="ok"),
    )
    second = do_send_message(session, "ask the helper", acting_user=ts.member)
    Membership.objects.unscoped().filter(tenant=ts.tenant, user=ts.member).update(role=Role.VIEWER)
    execute_run(second.pk, wait=True)
    # A viewer's run gets read-only tools: delegate is neither offered nor run.
    assert "delegate" not in tool_names(fake_llm.requests[-2])
    assert "not found" in last_tool_result(fake_llm.requests[-1])
    assert not Session.objects.unscoped().filter(parent=session).exists()
