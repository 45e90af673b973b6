"""E20: the sub_agent tool runs a child in its own session linked to the parent, with
read-only tools only (no spawning, no messages, no memory writes), a minimal prompt
and the 10-iteration cap; its answer comes back as the tool result."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agents.actions.conversation import do_create_session
from agents.actions.runs import do_send_message
from agents.models import ModelProfile, Session, Turn
from agents.runtime.worker import execute_run
from tests.fakes.fake_llm import Turn as FakeTurn

pytestmark = pytest.mark.django_db(transaction=True)


def tool_names(request) -> set[str]:
    return {t["function"]["name"] for t in request.json.get("tools") or []}


def test_a_sub_agent_works_in_a_linked_child_session_with_read_only_tools(live_agent, fake_llm):
    # 10 tokens in, 5 out per fake call: $0.02 a call at these prices.
    profile = ModelProfile.objects.unscoped().get(pk=live_agent.model.pk)
    profile.input_price, profile.output_price = Decimal(1000), Decimal(2000)
    profile.save()
    session = do_create_session(live_agent.agent, user=live_agent.member, title="research")
    fake_llm.script(
        FakeTurn(tool_calls=[("sub_agent", {"task": "Count the notes files", "title": "count"}, "call_sub")]),
        FakeTurn(tool_calls=[("glob", {"pattern": "*.md"}, "call_glob")]),
        FakeTurn(text="There are no notes yet."),
        FakeTurn(text="The sub-agent says there are no notes yet."),
    )
    run = do_send_message(session, "how many notes?", acting_user=live_agent.member)
    assert execute_run(run.pk, wait=True) == "completed", fake_llm.problems()
    parent_tools = tool_names(fake_llm.requests[0])
    child_tools = tool_names(fake_llm.requests[1])
    assert {"sub_agent", "bash", "write_file", "send_message", "memory_write"} <= parent_tools
    assert child_tools, "the child has tools"
    assert not child_tools & {
        "sub_agent",
        "bash",
        "write_file",
        "edit_file",
        "send_message",
        "memory_write",
        "schedule_task",
        "export_chat",
        "todo_write",
        "memory_delete",
    }
    assert {"read_file", "glob", "grep"} <= child_tools
    child_system = fake_llm.requests[1].json["messages"][0]["content"]
    assert "Count the notes files" in str(fake_llm.requests[1].json["messages"])
    assert len(child_system) < len(fake_llm.requests[0].json["messages"][0]["content"])  # minimal prompt
    child = Session.objects.unscoped().get(parent=session)
    assert (child.depth, child.tenant_id, child.user_id) == (1, session.tenant_id, live_agent.member.pk)
    assert Turn.objects.unscoped().get(session=child).state == "complete"
    tool_result = [m for m in fake_llm.requests[3].json["messages"] if m.get("role") == "tool"][-1]
    assert "no notes yet" in tool_result["content"]
    # The child's two calls are its own session's cost and are added to the parent's.
    child.refresh_from_db()
    assert child.cost == Decimal("0.04")
    assert Session.objects.unscoped().get(pk=session.pk).cost == Decimal("0.08")


def test_a_sub_agent_cannot_spawn_another(live_agent, fake_llm):
    session = do_create_session(live_agent.agent, user=live_agent.member, title="research")
    fake_llm.script(
        FakeTurn(tool_calls=[("sub_agent", {"task": "Delegate further"}, "call_sub")]),
        FakeTurn(tool_calls=[("sub_agent", {"task": "deeper"}, "call_deeper")]),
        FakeTurn(text="I could not delegate."),
        FakeTurn(text="Done."),
    )
    run = do_send_message(session, "go", acting_user=live_agent.member)
    assert execute_run(run.pk, wait=True) == "completed", fake_llm.problems()
    refused = [m for m in fake_llm.requests[2].json["messages"] if m.get("role") == "tool"][-1]
    assert "not" in refused["content"].lower()
    assert Session.objects.unscoped().filter(parent=session).count() == 1
    assert not Session.objects.unscoped().filter(depth=2).exists()
