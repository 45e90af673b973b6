"""Issue 26 item 7: a call that the path or command policy would refuse anyway is
refused at once -- the model gets the guard's error and can try again -- and never
offered to a person for approval. A call that would run still asks."""

from __future__ import annotations

import pytest

from agents.actions.conversation import do_create_session
from agents.actions.runs import do_send_message
from agents.models import ApprovalRequest
from agents.runtime.worker import execute_run
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.tools.helpers import Run, configure, tool_setting
from tools_app.registry import INVALID_ARGUMENTS, PATH_POLICY_BLOCKED

pytestmark = pytest.mark.django_db(transaction=True)


def tool_messages(request) -> list[dict]:
    return [m for m in request.json["messages"] if m.get("role") == "tool"]


def test_a_run_refuses_guarded_calls_at_once_and_asks_only_about_the_rest(live_agent, fake_llm):
    # Writes need approval (medium risk and up), bash too (high).
    configure(live_agent.agent, approval_mode="ask", approval_risk="medium")
    tool_setting(live_agent.agent, "bash", execution="host")
    session = do_create_session(live_agent.agent, user=live_agent.member, title="ops")
    fake_llm.script(
        FakeTurn(
            tool_calls=[
                ("bash", {"command": "cat .ssh/id_rsa"}, "call_key"),
                ("bash", {"command": "cat ../../other/notes.txt"}, "call_up"),
                ("write_file", {"path": "../escape.txt", "content": "x"}, "call_escape"),
                ("write_file", {"path": "app/.env", "content": "A=1"}, "call_env"),
                ("write_file", {"path": "notes.txt"}, "call_no_content"),
            ]
        ),
        FakeTurn(text="I cannot read those files."),
    )
    run = do_send_message(session, "show me the keys", acting_user=live_agent.member)
    assert execute_run(run.pk, wait=True) == "completed"
    assert not ApprovalRequest.objects.unscoped().filter(run=run).exists()
    results = {m["tool_call_id"]: m["content"] for m in tool_messages(fake_llm.requests[-1])}
    assert "may hold credentials" in results["call_key"]
    assert "leaves the workspace" in results["call_up"]
    assert "leaves the workspace" in results["call_escape"]
    assert "may hold credentials" in results["call_env"]
    assert "content" in results["call_no_content"]

    # The same tools with arguments that would run are still asked about.
    fake_llm.script(
        FakeTurn(
            tool_calls=[
                ("bash", {"command": "cat notes.txt"}, "call_ok"),
                ("write_file", {"path": "notes.txt", "content": "hi"}, "call_write"),
            ]
        )
    )
    asked = do_send_message(session, "read my notes", acting_user=live_agent.member)
    assert execute_run(asked.pk, wait=True) == "awaiting_approval"
    assert set(ApprovalRequest.objects.unscoped().filter(run=asked).values_list("call_id", flat=True)) == {
        "call_ok",
        "call_write",
    }


def test_the_executor_gives_the_guards_error_type(tenant_a):
    configure(tenant_a.agent, approval_mode="ask", approval_risk="medium")
    tool_setting(tenant_a.agent, "bash", execution="host")
    run = Run(tenant_a.agent, tenant_a.member)
    refused = run.call("write_file", path=".", content="x")
    assert (refused.error_type, "workspace itself" in refused.content) == (PATH_POLICY_BLOCKED, True)
    outside = run.call("bash", command="cat /home/someone/notes.txt")
    assert outside.error_type == PATH_POLICY_BLOCKED
    assert run.call("write_file", path="a.txt", content=7).error_type == INVALID_ARGUMENTS
    assert run.call("bash", command="ls").error_type == "approval_required"
    assert run.call("write_file", path="ok.txt", content="x").error_type == "approval_required"
