"""Run traces (O4): a run is a trace with an ``invoke_agent`` root and a child per
LLM call and tool call, GenAI attributes, stored in PostgreSQL, exported over OTLP,
and shown as a waterfall on the run's admin page."""

from __future__ import annotations

import pytest

from agents.actions.runs import do_send_message
from agents.engine.types import Usage
from agents.models import Agent
from agents.runtime.worker import execute_run
from claw_platform.observability.models import Span
from claw_platform.observability.run_trace import trace_id_for_run
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.platform.test_admin_isolation import client_for
from tests.runs.helpers import new_session

pytestmark = pytest.mark.django_db(transaction=True)


def run_with_two_tool_calls(live_agent, fake_llm, settings):
    settings.CLAW_RUN_TOOLS_FACTORY = "tests.observability.tools.two_tools"
    fake_llm.script(
        FakeTurn(
            tool_calls=[("lookup", {"q": "meaning"}, "call_1"), ("flaky", {"x": 1}, "call_2")],
            usage=Usage(input_tokens=120, output_tokens=30),
        ),
        FakeTurn(text="It is 42.", usage=Usage(input_tokens=200, output_tokens=8)),
    )
    run = do_send_message(new_session(live_agent), "what is it?", acting_user=live_agent.member)
    assert execute_run(run.pk, wait=True) == "completed"
    return run


def test_a_run_with_two_tool_calls_is_one_trace_of_the_right_shape(live_agent, fake_llm, settings, exported):
    run = run_with_two_tool_calls(live_agent, fake_llm, settings)
    spans = list(Span.objects.unscoped().filter(run=run).order_by("started_at", "id"))
    assert {s.trace_id for s in spans} == {trace_id_for_run(run.pk)}
    assert all(s.tenant_id == run.tenant_id for s in spans)
    root = next(s for s in spans if not s.parent_span_id)
    assert root.name == f"invoke_agent {live_agent.agent.name}"
    assert root.attributes["gen_ai.agent.name"] == live_agent.agent.name
    assert root.attributes["gen_ai.conversation.id"] == str(run.session_id)
    assert root.attributes["claw.run.status"] == "completed"
    children = [s for s in spans if s.parent_span_id == root.span_id]
    assert [s.name for s in children] == [
        "memory_recall",
        f"chat {live_agent.model.model}",
        "execute_tool lookup",
        "execute_tool flaky",
        f"chat {live_agent.model.model}",
    ]
    recall, first_chat, lookup, flaky, second_chat = children
    assert recall.kind == "memory"
    assert recall.attributes["claw.memory.personal"] is True
    assert recall.attributes["claw.memory.method"] in ("weighted", "rrf")
    assert first_chat.attributes["gen_ai.operation.name"] == "chat"
    assert first_chat.attributes["gen_ai.provider.name"]
    assert first_chat.attributes["gen_ai.request.model"] == live_agent.model.model
    assert first_chat.attributes["gen_ai.response.model"]
    assert first_chat.attributes["gen_ai.usage.input_tokens"] == 120
    assert first_chat.attributes["gen_ai.usage.output_tokens"] == 30
    assert first_chat.attributes["gen_ai.response.finish_reasons"] == ["tool_use"]
    assert second_chat.attributes["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert second_chat.output == "It is 42."
    assert lookup.attributes["gen_ai.tool.call.id"] == "call_1"
    assert lookup.attributes["gen_ai.conversation.id"] == str(run.session_id)
    assert (lookup.status, lookup.output) == ("ok", "the answer is 42")
    assert flaky.status == "error"
    assert flaky.attributes["error.type"] == "upstream_down"
    assert not first_chat.input  # inputs only in verbose mode
    for span in children:
        assert span.started_at >= root.started_at
        assert 0 <= span.duration_ms <= root.duration_ms

    exported_spans = exported.get_finished_spans()
    assert {format(s.context.span_id, "016x") for s in exported_spans} == {s.span_id for s in spans}
    assert {format(s.context.trace_id, "032x") for s in exported_spans} == {root.trace_id}
    by_name = {s.name: s for s in exported_spans}
    assert by_name["execute_tool flaky"].status.status_code.name == "ERROR"
    assert by_name["execute_tool lookup"].parent.span_id == int(root.span_id, 16)


def test_verbose_mode_keeps_inputs_and_outputs(live_agent, fake_llm, settings):
    Agent.objects.unscoped().filter(pk=live_agent.agent.pk).update(trace_verbose=True, config_version=999)
    run = run_with_two_tool_calls(live_agent, fake_llm, settings)
    chat = Span.objects.unscoped().filter(run=run, kind="chat").order_by("started_at").first()
    assert "what is it?" in chat.input
    lookup = Span.objects.unscoped().get(run=run, name="execute_tool lookup")
    assert lookup.input == '{"q": "meaning"}'


def test_the_runs_admin_page_shows_the_waterfall(live_agent, fake_llm, settings):
    run = run_with_two_tool_calls(live_agent, fake_llm, settings)
    client = client_for(live_agent.owner)
    page = client.get(f"/admin/agents/run/{run.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "claw-waterfall" in html
    assert "execute_tool lookup" in html
    assert "upstream_down" in html
