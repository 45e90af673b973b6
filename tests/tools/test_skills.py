"""T9: skills -- catalogue inline in the prompt when few, search when many,
activate_skill loads one; only the tenant's skills for the agent."""

from __future__ import annotations

import asyncio

import pytest

from agents.actions.config import do_create_agent
from agents.actions.conversation import do_create_session
from agents.engine.prompt import INLINE_LIST_MAX, build_system_prompt
from agents.engine.types import ToolCallPart
from agents.runtime.chat import prompt_context
from agents.runtime.resolution import resolve_agent
from agents.runtime.tools import registry_tools
from tests.tools.helpers import ctx_for
from tools_app.actions.extensions import do_create_skill
from tools_app.registry import TOOL_ERROR

pytestmark = pytest.mark.django_db(transaction=True)


def skill(tenant_set, name, description, body="", **kw):
    return do_create_skill(
        tenant_set.tenant,
        name=name,
        description=description,
        body=body or f"# {name}\nSteps for {name}.",
        **kw,
    )


def run_tools(tenant_set, agent=None):
    """The executor a run of this agent gets, and its system prompt."""
    agent = agent or tenant_set.agent
    session = do_create_session(agent, user=tenant_set.member, title="set")
    resolved = resolve_agent(agent.pk)
    tools = asyncio.run(registry_tools(resolved, session))
    prompt = build_system_prompt(prompt_context(resolved, session, tools, resolved.model, first_run=False))
    return tools, prompt


def use(tools, tenant_set, name, args):
    return asyncio.run(tools.execute(ToolCallPart("c1", name, args), ctx_for(tenant_set)))


def test_a_few_skills_are_listed_in_the_prompt_and_activated_by_name(tenant_a):
    skill(
        tenant_a,
        "pdf-report",
        "Write a PDF report from a spreadsheet.",
        body="1. Open the sheet.\n2. Chart it.",
    )
    skill(tenant_a, "triage", "Triage a support ticket.")
    skill(tenant_a, "retired", "An old skill.", enabled=False)
    tools, prompt = run_tools(tenant_a)
    names = [d.name for d in tools.definitions()]
    assert "activate_skill" in names
    assert "search_skills" not in names
    assert "<available_skills>" in prompt
    assert "- pdf-report: Write a PDF report from a spreadsheet." in prompt
    assert "- triage: Triage a support ticket." in prompt
    assert "retired" not in prompt
    loaded = use(tools, tenant_a, "activate_skill", {"name": "pdf-report"})
    assert not loaded.is_error
    assert loaded.content.startswith('<skill name="pdf-report">\n1. Open the sheet.\n2. Chart it.')
    missing = use(tools, tenant_a, "activate_skill", {"name": "retired"})
    assert missing.error_type == TOOL_ERROR
    assert "Available: pdf-report, triage." in missing.content


def test_many_skills_are_found_with_search(tenant_a):
    for number in range(INLINE_LIST_MAX + 2):
        skill(tenant_a, f"skill-{number:02d}", f"Routine chore number {number}.")
    skill(
        tenant_a,
        "invoice-reminder",
        "Chase unpaid invoices politely.",
        body="Look up overdue invoices in the ledger.",
    )
    tools, prompt = run_tools(tenant_a)
    assert "search_skills" in [d.name for d in tools.definitions()]
    assert f"{INLINE_LIST_MAX + 3} skills are available. Use `search_skills`" in prompt
    assert "<available_skills>" not in prompt
    found = use(tools, tenant_a, "search_skills", {"query": "overdue invoices"})
    assert found.content.splitlines()[0] == "- invoice-reminder: Chase unpaid invoices politely."
    partial = use(tools, tenant_a, "search_skills", {"query": "invoic"})  # no full word: substring fallback
    assert "invoice-reminder" in partial.content
    nothing = use(tools, tenant_a, "search_skills", {"query": "quantum chromodynamics"})
    assert "No skill matches" in nothing.content
    assert use(tools, tenant_a, "activate_skill", {"name": "invoice-reminder"}).content.count("ledger") == 1


def test_a_skill_limited_to_an_agent_stays_out_of_the_others(tenant_a):
    other = do_create_agent(tenant_a.tenant, slug="other", name="Other", model=tenant_a.model)
    skill(tenant_a, "only-other", "For the other agent.", agents=[other])
    tools, prompt = run_tools(tenant_a)
    assert "activate_skill" not in [d.name for d in tools.definitions()]
    assert "only-other" not in prompt
    other_tools, other_prompt = run_tools(tenant_a, agent=other)
    assert "only-other" in other_prompt
    assert not use(other_tools, tenant_a, "activate_skill", {"name": "only-other"}).is_error


def test_another_tenants_skills_never_apply(tenant_a, tenant_b):
    skill(tenant_a, "secret-recipe", "Tenant A's own know-how.", body="A's private steps")
    tools, prompt = run_tools(tenant_b)
    assert "secret-recipe" not in prompt
    result = use(tools, tenant_b, "activate_skill", {"name": "secret-recipe"})
    assert result.error_type == "unknown_tool"
    assert "A's private steps" not in result.content


def test_skills_follow_admin_changes_on_the_next_run(tenant_a):
    row = skill(tenant_a, "draft", "Draft skill.")
    assert "draft" in run_tools(tenant_a)[1]
    row.enabled = False
    row.save()
    assert "draft" not in run_tools(tenant_a)[1]
