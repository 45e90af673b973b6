"""Creating providers, model profiles, agents and their files outside the admin."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from agents.actions.revisions import do_record_agent_revision
from agents.models import Agent, AgentFile, LLMProvider, ModelProfile
from claw_platform.audit.actions import record_audit_event, snapshot
from claw_platform.tenancy.models import Tenant


@transaction.atomic
def do_create_provider(
    tenant: Tenant,
    *,
    name: str,
    kind: str,
    base_url: str,
    api_key: str = "",
    acting_user: Any = None,
    **fields: Any,
) -> LLMProvider:
    provider = LLMProvider(tenant=tenant, name=name, kind=kind, base_url=base_url, api_key=api_key, **fields)
    provider.full_clean()
    provider.save()
    record_audit_event(
        action="llmprovider.created",
        actor=acting_user,
        obj=provider,
        diff={k: [None, v] for k, v in snapshot(provider).items()},
    )
    return provider


@transaction.atomic
def do_create_model_profile(
    provider: LLMProvider, *, model: str, acting_user: Any = None, **fields: Any
) -> ModelProfile:
    profile = ModelProfile(tenant_id=provider.tenant_id, provider=provider, model=model, **fields)
    profile.full_clean()
    profile.save()
    record_audit_event(
        action="modelprofile.created",
        actor=acting_user,
        obj=profile,
        diff={k: [None, v] for k, v in snapshot(profile).items()},
    )
    return profile


@transaction.atomic
def do_create_agent(
    tenant: Tenant,
    *,
    slug: str,
    name: str,
    model: ModelProfile,
    acting_user: Any = None,
    files: dict[str, str] | None = None,
    **fields: Any,
) -> Agent:
    agent = Agent(tenant=tenant, slug=slug, name=name, model=model, **fields)
    agent.full_clean()
    agent.save()
    for file_name, content in (files or {}).items():
        agent_file = AgentFile(tenant=tenant, agent=agent, name=file_name, content=content)
        agent_file.full_clean()
        agent_file.save()
    record_audit_event(
        action="agent.created",
        actor=acting_user,
        obj=agent,
        diff={k: [None, v] for k, v in snapshot(agent).items()},
    )
    do_record_agent_revision(agent, acting_user=acting_user, note="Created")
    return agent


@transaction.atomic
def do_save_agent_file(
    agent: Agent, name: str, content: str, *, user: Any = None, acting_user: Any = None
) -> AgentFile:
    """Create or replace one context file (the agent's own, or ``user``'s copy)."""
    agent_file = AgentFile._base_manager.filter(agent=agent, name=name, user=user).first() or AgentFile(
        tenant_id=agent.tenant_id, agent=agent, name=name, user=user
    )
    before = agent_file.content if agent_file.pk else None
    agent_file.content = content
    agent_file.full_clean()
    agent_file.save()
    record_audit_event(
        action="agentfile.saved", actor=acting_user, obj=agent_file, diff={"content": [before, content]}
    )
    do_record_agent_revision(agent, acting_user=acting_user, note=f"{name} saved")
    return agent_file
