"""Self-repair (R3): a tool failing N times in a row for an agent is flagged (a row
in the admin's list, an audit row), left out of the agent's next runs, and offered
again once an admin clears it; a call that works resets the count, and a policy's
refusal is no failure of the tool."""

from __future__ import annotations

import pytest

from claw_platform.audit.models import AuditEvent
from tests.tools.helpers import Run
from tools_app.health import do_clear_tool_flag, record_tool_outcome
from tools_app.models import ToolHealth

pytestmark = pytest.mark.django_db(transaction=True)


def health(agent, tool):
    return ToolHealth._base_manager.filter(agent=agent, tool=tool).first()


def test_a_failing_tool_is_flagged_after_n_failures_and_left_out_until_cleared(tenant_a, settings):
    settings.CLAW_TOOL_FLAG_AFTER_FAILURES = 3
    run = Run(tenant_a.agent, tenant_a.member)
    for _ in range(2):
        failed = run.execute("read_file", path="missing.txt")
        assert failed.is_error, failed
    assert health(tenant_a.agent, "read_file").consecutive_failures == 2
    run.workspace.joinpath("there.txt").write_text("ok")
    assert not run.execute("read_file", path="there.txt").is_error  # works: the count resets
    assert health(tenant_a.agent, "read_file").consecutive_failures == 0
    for _ in range(3):
        run.execute("read_file", path="missing.txt")
    row = health(tenant_a.agent, "read_file")
    assert (row.consecutive_failures, row.flagged_at is not None) == (3, True)
    assert "missing.txt" in row.last_error
    assert AuditEvent._base_manager.filter(action="tool.flagged", object_id=str(row.pk)).count() == 1

    assert "read_file" not in Run(tenant_a.agent, tenant_a.member).executor.available_names
    do_clear_tool_flag(row, acting_user=tenant_a.admin)
    assert "read_file" in Run(tenant_a.agent, tenant_a.member).executor.available_names


def test_refusals_and_other_agents_do_not_count(tenant_a, settings):
    settings.CLAW_TOOL_FLAG_AFTER_FAILURES = 2
    for _ in range(3):
        record_tool_outcome(
            tenant_id=tenant_a.tenant.pk,
            agent_id=tenant_a.agent.pk,
            tool="bash",
            is_error=True,
            error_type="policy_denied",
        )
    assert health(tenant_a.agent, "bash") is None
    settings.CLAW_TOOL_FLAGGED_LEFT_OUT = False
    for _ in range(2):
        record_tool_outcome(
            tenant_id=tenant_a.tenant.pk,
            agent_id=tenant_a.agent.pk,
            tool="web_fetch",
            is_error=True,
            error_type="timeout",
        )
    assert health(tenant_a.agent, "web_fetch").flagged_at is not None
    # Flagged but, with the setting off, still offered.
    assert "web_fetch" in Run(tenant_a.agent, tenant_a.member).executor.available_names
