"""T12: risk per tool, approval modes per agent and per tool, "always" bound to the
exact call, and shell commands that are always high risk -- an attack table of
approval bypasses, each refused; then the policy in the real run flow, with
ApprovalRequest rows and an "always" grant recorded by do_record_always_approval."""

from __future__ import annotations

import pytest

from agents.actions.conversation import do_create_session
from agents.actions.runs import do_decide_approval, do_send_message
from agents.models import ApprovalRequest, RunStatus
from agents.runtime.worker import execute_run
from claw_platform.audit.models import AuditEvent
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.tools.helpers import Run, configure, tool_setting
from tools_app.actions import do_record_always_approval
from tools_app.builtins import BUILTIN_TOOLS
from tools_app.models import ToolApprovalGrant
from tools_app.policy.approval import AgentPolicy, ApprovalPolicy, ToolRule, arguments_digest
from tools_app.policy.shell_risk import classify_command

TOOLS = {tool.name: tool for tool in BUILTIN_TOOLS}
BASH = TOOLS["bash"]

# An admin lowered bash to medium risk and asks from high: simple commands run, but
# none of these may ride on that.
BYPASSES = [
    "ls; rm -rf x",
    "ls && rm -rf x",
    "ls || rm -rf x",
    "ls & rm -rf x",
    "ls\nrm -rf x",
    "ls | xargs rm",
    "echo $(rm -rf x)",
    "echo `rm -rf x`",
    "cat <(rm -rf x)",
    "env rm -rf x",
    "/usr/bin/env rm -rf x",
    "sudo rm -rf x",
    "/usr/bin/sudo rm -rf x",
    "doas rm -rf x",
    "busybox sh -c 'rm -rf x'",
    "sh -c 'rm -rf x'",
    "bash -c 'rm -rf x'",
    "/bin/bash -c 'rm -rf x'",
    "xargs rm",
    "nohup rm -rf x",
    "timeout 5 rm -rf x",
    "nice rm -rf x",
    "find . -exec rm {} ;",
    "python3 -c 'import shutil; shutil.rmtree(\"x\")'",
    "rm -rf x",
    "echo hi > important.txt",
    "cat < /etc/passwd",
    "X=1 rm x",
    "$CMD x",
    "${CMD} x",
    "eval rm x",
    "for f in *; do rm $f; done",
    "(rm -rf x)",
    "{ rm -rf x; }",
    "f() { rm -rf x; }; f",
    "ls 'unterminated",
]


def lowered_bash_policy(grants=()) -> ApprovalPolicy:
    return ApprovalPolicy(
        AgentPolicy(mode="ask", approval_risk="high", rules=(ToolRule("bash", risk="medium"),)), grants
    )


def test_a_simple_command_runs_under_the_lowered_risk():
    assert lowered_bash_policy().decide(BASH, {"command": "ls -la docs"}).action == "allow"


@pytest.mark.parametrize("command", BYPASSES)
def test_it_treats_chaining_substitution_redirects_and_wrappers_as_high_risk(command):
    policy = lowered_bash_policy()
    decision = policy.decide(BASH, {"command": command})
    assert decision.action == "needs_approval", (command, classify_command(command))
    assert policy.call_risk(BASH, {"command": command})[0] == "high"


@pytest.mark.parametrize(
    "command", ["ls; rm -rf x", "ls && rm x", "ls $(rm x)", "ls `rm x`", "ls > x", "ls ", " ls", "ls -l"]
)
def test_an_always_for_ls_never_covers_other_arguments(command):
    grants = {("bash", arguments_digest({"command": "ls"}))}
    policy = ApprovalPolicy(AgentPolicy(), grants)  # bash is high: it asks by default
    assert policy.decide(BASH, {"command": "ls"}).action == "allow"
    assert policy.decide(BASH, {"command": command}).action == "needs_approval"
    assert policy.decide(BASH, {"command": "ls", "timeout_seconds": 5}).action == "needs_approval"


def test_an_always_is_bound_to_its_tool():
    arguments = {"path": "x.txt", "content": "hi"}
    grants = {("write_file", arguments_digest(arguments))}
    policy = ApprovalPolicy(AgentPolicy(approval_risk="medium"), grants)
    assert policy.decide(TOOLS["write_file"], arguments).action == "allow"
    assert policy.decide(TOOLS["edit_file"], arguments).action == "needs_approval"


def test_canonical_arguments_ignore_key_order_only():
    assert arguments_digest({"a": 1, "b": 2}) == arguments_digest({"b": 2, "a": 1})
    assert arguments_digest({"a": 1}) != arguments_digest({"a": "1"})


def test_risk_levels_bash_high_writes_and_messages_medium_reads_low():
    assert BASH.traits.risk == "high"
    for name in ("write_file", "edit_file", "send_message", "memory_write", "memory_update", "memory_delete"):
        assert TOOLS[name].traits.risk == "medium", name
    for name in ("read_file", "list_dir", "glob", "grep", "memory_search", "todo_read", "get_current_time"):
        assert TOOLS[name].traits.risk == "low", name
        assert TOOLS[name].traits.read_only, name


def test_modes_auto_ask_deny_and_read_only():
    write = TOOLS["write_file"]
    read = TOOLS["read_file"]
    args = {"path": "a", "content": "b"}
    assert ApprovalPolicy(AgentPolicy(mode="auto")).decide(BASH, {"command": "rm -rf x"}).action == "allow"
    ask_medium = ApprovalPolicy(AgentPolicy(mode="ask", approval_risk="medium"))
    assert ask_medium.decide(write, args).action == "needs_approval"
    assert ask_medium.decide(read, {"path": "a"}).action == "allow"
    deny = ApprovalPolicy(AgentPolicy(mode="deny", approval_risk="medium"))
    assert deny.decide(write, args).action == "deny"
    assert deny.decide(BASH, {"command": "ls"}).action == "deny"
    assert deny.decide(read, {"path": "a"}).action == "allow"
    read_only = ApprovalPolicy(AgentPolicy(mode="read_only"))
    assert not read_only.offered(write)
    assert read_only.offered(read)
    assert read_only.offered(BASH)
    assert read_only.decide(BASH, {"command": "grep -r TODO ."}).action == "allow"
    for command in ("rm x", "ls; rm x", "sort -o out in", "find . -delete", "./ls", "touch x"):
        assert read_only.decide(BASH, {"command": command}).action == "deny", command
    assert read_only.decide(write, args).action == "deny"


def test_per_tool_modes_override_the_agents():
    policy = ApprovalPolicy(
        AgentPolicy(
            mode="auto",
            rules=(ToolRule("read_file", approval_mode="ask"), ToolRule("mem*", approval_mode="deny")),
        )
    )
    assert policy.decide(TOOLS["read_file"], {"path": "a"}).action == "needs_approval"
    assert not policy.offered(TOOLS["memory_write"])
    assert policy.decide(TOOLS["memory_search"], {}).action == "deny"
    assert policy.decide(TOOLS["write_file"], {"path": "a", "content": ""}).action == "allow"
    exact_wins = AgentPolicy(
        rules=(ToolRule("b*", approval_mode="deny"), ToolRule("bash", approval_mode="auto"))
    )
    assert exact_wins.rule_for("bash").approval_mode == "auto"


# ----------------------------------------------------------- with the database

pytestmark_db = pytest.mark.django_db(transaction=True)


@pytestmark_db
def test_the_agent_configuration_reaches_the_run(tenant_a):
    configure(
        tenant_a.agent, allowed_tools="read_file\nwrite_*\nbash\nmemory_*", denied_tools="memory_delete"
    )
    tool_setting(tenant_a.agent, "write_file", approval_mode="ask")
    run = Run(tenant_a.agent, tenant_a.member)
    names = {d.name for d in run.executor.definitions()}
    assert names == {"read_file", "write_file", "bash", "memory_write", "memory_search", "memory_update"}
    assert run.call("write_file", path="a.txt", content="x").error_type == "approval_required"
    assert run.call("memory_delete", id=1).error_type == "policy_denied"
    assert run.call("get_current_time").error_type == "policy_denied"
    viewer = Run(tenant_a.agent, tenant_a.viewer)
    assert {d.name for d in viewer.executor.definitions()} == {"read_file", "memory_search"}  # X2


@pytestmark_db
def test_a_configuration_change_reaches_the_next_run(tenant_a):
    """The agent's tool config and policy are read once per revision of the agent: a
    change (which bumps the revision) is what the next run gets, an unchanged agent's
    next run reads none of them again."""
    run = Run(tenant_a.agent, tenant_a.member)
    assert run.call("write_file", path="a.txt", content="x").is_error is False
    setting = tool_setting(tenant_a.agent, "write_file", approval_mode="ask")
    assert Run(tenant_a.agent, tenant_a.member).call("write_file", path="b.txt", content="x").error_type == (
        "approval_required"
    )
    setting.approval_mode = "deny"
    setting.save()
    assert Run(tenant_a.agent, tenant_a.member).call("write_file", path="c.txt", content="x").error_type == (
        "policy_denied"
    )
    configure(tenant_a.agent, denied_tools="write_file")
    later = Run(tenant_a.agent, tenant_a.member)
    assert "write_file" not in {d.name for d in later.executor.definitions()}
    setting.delete()
    configure(tenant_a.agent, denied_tools="")
    assert (
        Run(tenant_a.agent, tenant_a.member).call("write_file", path="d.txt", content="x").is_error is False
    )


@pytestmark_db
def test_read_only_agents_offer_only_reading_tools(tenant_a):
    configure(tenant_a.agent, approval_mode="read_only")
    run = Run(tenant_a.agent, tenant_a.owner)
    names = {d.name for d in run.executor.definitions()}
    assert "write_file" not in names
    assert "memory_write" not in names
    assert "send_message" not in names
    assert {"read_file", "bash", "grep"} <= names
    assert run.call("bash", command="ls").is_error is False
    assert run.call("bash", command="touch x").error_type == "policy_denied"
    assert not (run.workspace / "x").exists()


@pytestmark_db
def test_an_approval_and_its_always_grant_in_the_run_flow(live_agent, fake_llm):
    tool_setting(live_agent.agent, "bash", execution="host")
    session = do_create_session(live_agent.agent, user=live_agent.member, title="ops")
    fake_llm.script(FakeTurn(tool_calls=[("bash", {"command": "ls"}, "call_ls")]))
    run = do_send_message(session, "list files", acting_user=live_agent.member)
    assert execute_run(run.pk, wait=True) == "awaiting_approval"
    approval = ApprovalRequest.objects.unscoped().get(run=run)
    assert (approval.tool_name, approval.arguments, approval.risk) == ("bash", {"command": "ls"}, "high")
    do_decide_approval(approval, True, acting_user=live_agent.member)
    grant = do_record_always_approval(approval, acting_user=live_agent.member)
    assert (grant.tool_name, grant.session_id) == ("bash", session.pk)
    assert (
        AuditEvent.objects.unscoped()
        .filter(action="approval.always_granted", object_id=str(grant.pk))
        .exists()
    )
    fake_llm.script(FakeTurn(text="Listed."))
    assert execute_run(run.pk, wait=True) == "completed"

    # The same call again in this session runs without asking ...
    fake_llm.script(
        FakeTurn(tool_calls=[("bash", {"command": "ls"}, "call_ls2")]),
        FakeTurn(text="Listed again."),
    )
    again = do_send_message(session, "again", acting_user=live_agent.member)
    assert execute_run(again.pk, wait=True) == "completed"
    # ... but not with more appended, and not in another session.
    fake_llm.script(FakeTurn(tool_calls=[("bash", {"command": "ls; rm -rf x"}, "call_rm")]))
    sneaky = do_send_message(session, "tidy up", acting_user=live_agent.member)
    assert execute_run(sneaky.pk, wait=True) == "awaiting_approval"
    assert ApprovalRequest.objects.unscoped().get(run=sneaky).risk == "high"
    other = do_create_session(live_agent.agent, user=live_agent.member, title="other")
    fake_llm.script(FakeTurn(tool_calls=[("bash", {"command": "ls"}, "call_ls3")]))
    elsewhere = do_send_message(other, "list", acting_user=live_agent.member)
    assert execute_run(elsewhere.pk, wait=True) == "awaiting_approval"
    assert ToolApprovalGrant.objects.unscoped().count() == 1


@pytestmark_db
def test_a_denied_request_cannot_become_an_always_and_outsiders_cannot_grant(live_agent, fake_llm, tenant_b):
    session = do_create_session(live_agent.agent, user=live_agent.member, title="ops")
    fake_llm.script(FakeTurn(tool_calls=[("bash", {"command": "ls"}, "call_ls")]))
    run = do_send_message(session, "list files", acting_user=live_agent.member)
    assert execute_run(run.pk, wait=True) == "awaiting_approval"
    approval = ApprovalRequest.objects.unscoped().get(run=run)
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        do_record_always_approval(approval, acting_user=tenant_b.owner)
    with pytest.raises(PermissionDenied):
        do_record_always_approval(approval, acting_user=live_agent.viewer)
    do_decide_approval(approval, False, acting_user=live_agent.member)
    with pytest.raises(ValueError, match="denied"):
        do_record_always_approval(approval, acting_user=live_agent.member)
    assert not ToolApprovalGrant.objects.unscoped().exists()
    assert type(run).objects.unscoped().get(pk=run.pk).status == RunStatus.QUEUED
