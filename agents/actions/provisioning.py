"""A newcomer can chat at once: the first start with provider credentials in the
environment creates a provider, a model profile and an ``assistant`` agent.

ANTHROPIC_API_KEY             -> Anthropic provider (default model claude-sonnet-4-5)
OPENAI_API_KEY / OPENAI_BASE_URL -> OpenAI-compatible provider (default model gpt-4o-mini;
                                  OPENAI_BASE_URL alone serves a local Ollama or vLLM)
CLAW_DEFAULT_MODEL            -> the model id to use instead of the default
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from agents.actions.config import do_create_agent, do_create_model_profile, do_create_provider
from agents.models import Agent, LLMProvider, ModelProfile, ProviderKind
from claw_platform.tenancy.models import Tenant

DEFAULT_AGENT_SLUG = "assistant"
DEFAULT_SOUL = (
    "You are a helpful, precise assistant. Answer directly, say when you are unsure, "
    "and use your tools when they help."
)


@dataclass(frozen=True)
class ProviderSpec:
    name: str
    kind: str
    base_url: str
    api_key: str
    model: str


def provider_from_env(env: Mapping[str, str]) -> ProviderSpec | None:
    model = env.get("CLAW_DEFAULT_MODEL", "").strip()
    if env.get("ANTHROPIC_API_KEY", "").strip():
        return ProviderSpec(
            "anthropic",
            ProviderKind.ANTHROPIC,
            env.get("ANTHROPIC_BASE_URL", "").strip() or "https://api.anthropic.com",
            env["ANTHROPIC_API_KEY"].strip(),
            model or "claude-sonnet-4-5",
        )
    key = env.get("OPENAI_API_KEY", "").strip()
    base_url = env.get("OPENAI_BASE_URL", "").strip()
    if key or base_url:
        return ProviderSpec(
            "openai" if not base_url else "openai-compatible",
            ProviderKind.OPENAI_COMPATIBLE,
            base_url or "https://api.openai.com/v1",
            key,
            model or "gpt-4o-mini",
        )
    return None


@transaction.atomic
def ensure_default_agent(tenant: Tenant, spec: ProviderSpec, *, acting_user: Any = None) -> Agent:
    """The tenant's ``assistant`` agent on ``spec``'s provider; created once."""
    agent = Agent._base_manager.filter(tenant=tenant, slug=DEFAULT_AGENT_SLUG).first()
    if agent is not None:
        return agent
    provider = LLMProvider._base_manager.filter(tenant=tenant, name=spec.name).first() or do_create_provider(
        tenant,
        name=spec.name,
        kind=spec.kind,
        base_url=spec.base_url,
        api_key=spec.api_key,
        acting_user=acting_user,
    )
    profile = ModelProfile._base_manager.filter(tenant=tenant, provider=provider, model=spec.model).first()
    if profile is None:
        profile = do_create_model_profile(
            provider,
            model=spec.model,
            acting_user=acting_user,
            supports_vision=spec.kind == ProviderKind.ANTHROPIC,
            supports_thinking=spec.kind == ProviderKind.ANTHROPIC,
        )
    return do_create_agent(
        tenant,
        slug=DEFAULT_AGENT_SLUG,
        name="Assistant",
        model=profile,
        acting_user=acting_user,
        description="A general assistant.",
        files={"SOUL.md": DEFAULT_SOUL},
    )
