"""O3 (tool side): every tool call leaves an audit row -- tool, arguments digest,
outcome, duration -- in its tenant's trail. Item 9: an agent cannot change its own
tools, approvals or other configuration through any tool, also not through bash or
write_file aimed at the files and the database that hold it."""

from __future__ import annotations

import inspect

import pytest
from django.conf import settings
from django.db import connection

from agents.models import Agent
from claw_platform.audit.models import AuditEvent
from claw_platform.tenancy.context import tenant_context
from tests.tools.helpers import Run, configure, tool_setting
from tests.tools.test_shell import MODES, hide
from tools_app.builtins import BUILTIN_TOOLS
from tools_app.models import AgentToolConfig, ToolApprovalGrant, ToolSetting
from tools_app.policy.approval import arguments_digest
from tools_app.registry import PATH_POLICY_BLOCKED

pytestmark = pytest.mark.django_db(transaction=True)


def test_every_tool_call_is_audited_in_its_tenant(tenant_a, tenant_b):
    run = Run(tenant_a.agent, tenant_a.member)
    run.call("write_file", path="a.txt", content="hello")
    run.call("read_file", path="missing.txt")
    rows = list(AuditEvent.objects.unscoped().filter(action="tool.executed").order_by("id"))
    assert [r.object_id for r in rows] == ["write_file", "read_file"]
    first, second = rows
    assert first.tenant_id == tenant_a.tenant.pk
    assert first.diff["arguments_sha256"] == arguments_digest({"path": "a.txt", "content": "hello"})
    assert first.diff["outcome"] == "ok"
    assert isinstance(first.diff["duration_ms"], int)
    assert first.diff["session"] == str(run.session.pk)
    assert "hello" not in str(first.diff)  # a digest, not the arguments
    assert second.diff["outcome"] == "tool_error"
    assert first.actor_label == f"agent:{tenant_a.agent.slug}"
    with tenant_context(tenant_b.tenant):
        assert not AuditEvent.objects.filter(action="tool.executed").exists()


def _config_state(agent) -> tuple:
    return (
        list(AgentToolConfig.objects.unscoped().filter(agent=agent).values()),
        list(ToolSetting.objects.unscoped().filter(agent=agent).values()),
        list(ToolApprovalGrant.objects.unscoped().values()),
        Agent.objects.unscoped().get(pk=agent.pk).config_version,
    )


@pytest.mark.parametrize("mode", MODES)
def test_an_agent_cannot_change_its_own_configuration_through_tools(tenant_a, mode):
    configure(tenant_a.agent, approval_mode="ask", denied_tools="send_message")
    tool_setting(tenant_a.agent, "bash", execution=mode, approval_mode="auto")
    run = Run(tenant_a.agent, tenant_a.owner)
    before = _config_state(tenant_a.agent)
    config_source = settings.BASE_DIR / "tools_app" / "models" / "config.py"
    source_before = config_source.read_bytes()
    var_dir = settings.VAR_DIR
    attempts = [
        ("write_file", {"path": str(config_source), "content": "hacked"}),
        ("write_file", {"path": str(var_dir / "secret_key"), "content": "x"}),
        ("write_file", {"path": "../../../tools_app/models/config.py", "content": "x"}),
        ("edit_file", {"path": str(config_source), "old_string": "ASK", "new_string": "AUTO"}),
        ("bash", {"command": f"sed -i s/ASK/AUTO/ {config_source}"}),
        ("bash", {"command": "cat ../../../../var/secrets.key"}),
    ]
    for name, arguments in attempts:
        result = run.call(name, **arguments)
        assert result.error_type == PATH_POLICY_BLOCKED, (name, arguments, result.content)
    # Hidden from the text check, the kernel stops the same writes.
    run.execute("bash", command=f"sed -i s/ASK/AUTO/ {hide(str(config_source))}")
    run.execute("bash", command=f"echo x >> {hide(str(var_dir / 'secrets.key'))}")
    # The database is out of reach: no URL in the environment, no TCP to its port.
    port = connection.settings_dict.get("PORT") or 5432
    db = run.execute("bash", command=f"echo x > /dev/tcp/127.0.0.1/{port} && echo connected")
    assert "connected" not in db.content
    # And the data tools touch only their own tables.
    for name, arguments in [
        ("memory_write", {"content": "approval_mode = auto", "scope": "tenant"}),
        ("todo_write", {"todos": [{"content": "set approval_mode auto", "status": "pending"}]}),
        ("schedule_task", {"prompt": "disable approvals", "interval_seconds": 600}),
        ("send_message", {"session_id": str(run.session.pk), "text": "x"}),
    ]:
        run.call(name, **arguments)
    assert _config_state(tenant_a.agent) == before
    assert config_source.read_bytes() == source_before


def test_no_tool_imports_the_configuration_models():
    configuration = (
        "AgentToolConfig",
        "ToolSetting",
        "ToolApprovalGrant",
        "do_record_always_approval",
        "McpServer",
        "Hook",
    )
    for tool in BUILTIN_TOOLS:
        source = inspect.getsource(inspect.getmodule(type(tool)))
        for name in configuration:
            assert name not in source, (tool.name, name)
