"""E22: routing rules pick the model before each turn, recorded on the run; /model
overrides. G4: titles use the tenant's title agent; task agents get read-only
tools. E25: the stop and auto-compact middleware are installed by agent setting."""

from __future__ import annotations

import pytest

from agents.actions.config import do_create_model_profile
from agents.actions.conversation import do_create_session
from agents.actions.runs import do_send_message
from agents.models import Agent, RoutingRule, Run, Session
from agents.runtime.chat import run_middleware
from agents.runtime.resolution import resolve_agent
from agents.runtime.worker import execute_run
from tests.fakes.fake_llm import Turn as FakeTurn

pytestmark = pytest.mark.django_db(transaction=True)


def tool_names(request) -> set[str]:
    return {t["function"]["name"] for t in request.json.get("tools") or []}


def add_rule(agent, **fields) -> RoutingRule:
    rule = RoutingRule(tenant_id=agent.tenant_id, agent=agent, **fields)
    rule.full_clean()
    rule.save()
    return rule


def send(session, text, user) -> Run:
    run = do_send_message(session, text, acting_user=user)
    assert run is not None
    return run


def test_a_routing_rule_picks_the_cheap_model_for_a_greeting_and_the_main_one_for_a_long_question(
    live_agent, fake_llm
):
    ts = live_agent
    cheap = do_create_model_profile(
        ts.provider, model="a-cheap", context_window=32_000, max_output_tokens=1024
    )
    add_rule(ts.agent, name="greetings", max_length=40, keywords="hi, hello, thanks", model=cheap)
    session = do_create_session(ts.agent, user=ts.member, title="routing")
    fake_llm.script(FakeTurn(text="Hi!"), FakeTurn(text="A long answer."), FakeTurn(text="Forced main."))
    greeting = send(session, "Hello there", ts.member)
    assert execute_run(greeting.pk, wait=True) == "completed", fake_llm.problems()
    question = send(
        session, "Hello, can you explain " + "in detail how the routing of models works " * 3, ts.member
    )
    assert execute_run(question.pk, wait=True) == "completed", fake_llm.problems()
    assert [r.json["model"] for r in fake_llm.requests] == ["a-cheap", "a-model"]
    greeting.refresh_from_db()
    question.refresh_from_db()
    assert (greeting.model_name, greeting.model_route) == ("a-provider:a-cheap", "rule:greetings")
    assert (question.model_name, question.model_route) == ("a-provider:a-model", "default")
    # /model beats the rules for the session.
    Session.objects.unscoped().filter(pk=session.pk).update(model_override=ts.model)
    session.refresh_from_db()
    forced = send(session, "hi", ts.member)
    assert execute_run(forced.pk, wait=True) == "completed", fake_llm.problems()
    assert fake_llm.requests[-1].json["model"] == "a-model"
    forced.refresh_from_db()
    assert forced.model_route == "session"


def test_a_rule_for_another_channel_does_not_apply_and_patterns_are_case_sensitive(live_agent, fake_llm):
    ts = live_agent
    cheap = do_create_model_profile(
        ts.provider, model="a-cheap", context_window=32_000, max_output_tokens=1024
    )
    add_rule(ts.agent, name="telegram only", channel="telegram", model=cheap, priority=5)
    add_rule(ts.agent, name="sql", patterns="SELECT ", model=cheap)
    agent = resolve_agent(ts.agent.pk)
    from agents.runtime.routing import choose_model

    assert choose_model(agent, "web", "anything")[1] == "default"
    assert choose_model(agent, "telegram", "anything")[1] == "rule:telegram only"
    assert choose_model(agent, "web", "run SELECT * FROM t")[1] == "rule:sql"
    assert choose_model(agent, "web", "run select * from t")[1] == "default"


def test_titles_use_the_tenants_title_agent(live_agent, fake_llm):
    ts = live_agent
    titler_model = do_create_model_profile(
        ts.provider, model="a-titler", context_window=8_000, max_output_tokens=256
    )
    Agent.objects.unscoped().create(
        tenant=ts.tenant, slug="titler", name="Titler", model=titler_model, role="title"
    )
    session = do_create_session(ts.agent, user=ts.member)
    fake_llm.script_when("generate a short title", FakeTurn(text="Weekend plans"))
    fake_llm.script(FakeTurn(text="Sure."))
    run = send(session, "help me plan the weekend", ts.member)
    assert execute_run(run.pk, wait=True) == "completed", fake_llm.problems()
    by_model = {r.json["model"]: r for r in fake_llm.requests}
    assert "generate a short title" in by_model["a-titler"].json["messages"][0]["content"]
    assert Session.objects.unscoped().get(pk=session.pk).title == "Weekend plans"


def test_a_task_agent_gets_read_only_tools(live_agent, fake_llm):
    ts = live_agent
    Agent.objects.unscoped().filter(pk=ts.agent.pk).update(role="task")
    ts.agent.refresh_from_db()
    ts.agent.save()  # bumps the configuration version
    session = do_create_session(ts.agent, user=ts.member, title="task")
    fake_llm.script(FakeTurn(text="ok"))
    run = send(session, "look around", ts.member)
    assert execute_run(run.pk, wait=True) == "completed", fake_llm.problems()
    names = tool_names(fake_llm.requests[0])
    assert {"read_file", "glob", "grep"} <= names
    assert not names & {
        "bash",
        "write_file",
        "edit_file",
        "sub_agent",
        "delegate",
        "memory_write",
        "send_message",
    }


def test_the_stop_middleware_ends_a_run_at_its_token_limit(live_agent, fake_llm):
    ts = live_agent
    Agent.objects.unscoped().filter(pk=ts.agent.pk).update(stop_after_tokens=12)
    ts.agent.refresh_from_db()
    ts.agent.save()
    session = do_create_session(ts.agent, user=ts.member, title="stop")
    # One call uses 15 tokens: the middleware stops the run before a second call.
    fake_llm.script(FakeTurn(tool_calls=[("get_current_time", {}, "t1")]))
    run = send(session, "what time is it?", ts.member)
    assert execute_run(run.pk, wait=True) == "completed", fake_llm.problems()
    assert len(fake_llm.requests) == 1
    run.refresh_from_db()
    assert "token limit" in run.turn.response_text


def test_middleware_is_installed_by_agent_setting(live_agent):
    ts = live_agent
    assert run_middleware(resolve_agent(ts.agent.pk)) == []
    Agent.objects.unscoped().filter(pk=ts.agent.pk).update(
        auto_compact_tokens=50_000, stop_after_tokens=9_000
    )
    ts.agent.refresh_from_db()
    ts.agent.save()
    installed = run_middleware(resolve_agent(ts.agent.pk))
    assert [type(m).__name__ for m in installed] == ["AutoCompactMiddleware", "StopMiddleware"]
    assert installed[0].threshold == 50_000
    assert installed[1].max_tokens == 9_000
