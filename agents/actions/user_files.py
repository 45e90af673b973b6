"""G3: a user's own copies of the per-user context files, seeded once, on their
first chat with an agent (GoClaw's EnsureUserFiles).

The per-user files are the ones about the user: USER.md and MEMORY.md. An agent that
has them gives each user a copy of its templates; the persona and instructions
(SOUL.md, AGENTS.md ...) stay the agent's, so an admin's later edit reaches everyone.
A predefined agent (shared context) seeds only USER.md: its MEMORY.md is shared.
From then on the user's copy takes precedence over the agent's
(``ResolvedAgent.context_files``) and is theirs to change. Seeding is idempotent
(a file the user already has is kept) and runs only on the first session, so a copy
the user deleted is not brought back.
"""

from __future__ import annotations

from typing import Any

from django.db.models import F

from agents.models import Agent, AgentFile, AgentType, Session

OPEN_PER_USER = frozenset({"USER.md", "MEMORY.md"})
PREDEFINED_PER_USER = frozenset({"USER.md"})


def per_user_file_names(agent: Agent, names: list[str]) -> list[str]:
    wanted = PREDEFINED_PER_USER if agent.agent_type == AgentType.PREDEFINED else OPEN_PER_USER
    return [n for n in names if n in wanted]


def seed_user_files(agent: Agent, user: Any) -> int:
    """Copy the agent's per-user files for ``user`` (those it lacks); the count made."""
    templates = dict(
        AgentFile._base_manager.filter(agent_id=agent.pk, user__isnull=True).values_list("name", "content")
    )
    names = per_user_file_names(agent, sorted(templates))
    if not names:
        return 0
    made = AgentFile._base_manager.bulk_create(
        [
            AgentFile(
                tenant_id=agent.tenant_id, agent_id=agent.pk, user_id=user.pk, name=n, content=templates[n]
            )
            for n in names
        ],
        ignore_conflicts=True,
    )
    # bulk_create sends no signals: bump the agent so every process reloads its files.
    from agents.runtime.resolution import invalidate

    Agent._base_manager.filter(pk=agent.pk).update(config_version=F("config_version") + 1)
    invalidate(agent.pk)
    return len(made)


def is_first_chat(agent: Agent, user: Any) -> bool:
    return not Session._base_manager.filter(agent_id=agent.pk, user_id=user.pk).exists()
