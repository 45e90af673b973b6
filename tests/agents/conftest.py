from __future__ import annotations

import pytest

from agents.models import LLMProvider


@pytest.fixture
def live_agent(tenant_a, fake_llm):
    """Tenant A's agent, its provider pointed at the fake LLM (OpenAI wire)."""
    LLMProvider.objects.unscoped().filter(pk=tenant_a.provider.pk).update(base_url=fake_llm.openai_base_url)
    provider = LLMProvider.objects.unscoped().get(pk=tenant_a.provider.pk)
    provider.save()  # signals bump the agent's config version (G2)
    return tenant_a
