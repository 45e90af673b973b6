"""G3: a user's own copies of the per-user context files are seeded once, on their
first chat: from the agent's templates, never over a copy they have, never again
after they deleted it; the run's prompt then reads the user's copy."""

from __future__ import annotations

import pytest

from agents.actions.config import do_save_agent_file
from agents.actions.conversation import do_create_session
from agents.models import AgentFile
from agents.runtime.resolution import resolve_agent

pytestmark = pytest.mark.django_db(transaction=True)


def own_files(ts, user):
    return dict(AgentFile.objects.unscoped().filter(agent=ts.agent, user=user).values_list("name", "content"))


def test_a_first_chat_seeds_the_users_files_once(tenant_a):
    do_save_agent_file(tenant_a.agent, "USER.md", "Name: (ask)\nTimezone: (ask)")
    do_save_agent_file(tenant_a.agent, "MEMORY.md", "Nothing yet.")
    user = tenant_a.admin  # no chat with this agent yet
    do_save_agent_file(tenant_a.agent, "MEMORY.md", "Already mine.", user=user)

    do_create_session(tenant_a.agent, user=user)
    assert own_files(tenant_a, user) == {
        "USER.md": "Name: (ask)\nTimezone: (ask)",
        "MEMORY.md": "Already mine.",
    }
    # The persona stays the agent's: an admin's edit reaches every user.
    assert "SOUL.md" not in own_files(tenant_a, user)
    assert resolve_agent(tenant_a.agent.pk).context_files(user.pk)["USER.md"].startswith("Name:")

    # Not again: a deleted copy stays deleted on the next chat.
    AgentFile.objects.unscoped().filter(agent=tenant_a.agent, user=user, name="USER.md").delete()
    do_create_session(tenant_a.agent, user=user)
    assert "USER.md" not in own_files(tenant_a, user)


def test_a_predefined_agent_seeds_only_user_md(tenant_a):
    agent = tenant_a.agent
    agent.agent_type = "predefined"
    agent.save()
    do_save_agent_file(agent, "USER.md", "About you:")
    do_save_agent_file(agent, "MEMORY.md", "Team facts.")
    do_create_session(agent, user=tenant_a.owner)
    assert own_files(tenant_a, tenant_a.owner) == {"USER.md": "About you:"}
