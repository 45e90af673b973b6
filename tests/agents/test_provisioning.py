"""A newcomer can chat at once: provider credentials in the environment give the
default tenant a provider, a model profile and an `assistant` agent on first start."""

from __future__ import annotations

from agents.actions.provisioning import ensure_default_agent, provider_from_env
from agents.models import Agent, LLMProvider, ModelProfile
from claw_platform.cli.bootstrap import provision_default_agent
from claw_platform.tenancy.actions import do_create_tenant


def test_anthropic_key_wins_and_picks_the_default_model():
    spec = provider_from_env({"ANTHROPIC_API_KEY": "sk-ant-x", "OPENAI_API_KEY": "sk-o"})
    assert spec is not None
    assert spec.kind == "anthropic"
    assert spec.model == "claude-sonnet-4-5"
    assert spec.base_url == "https://api.anthropic.com"


def test_a_base_url_alone_serves_a_local_server_with_the_chosen_model():
    spec = provider_from_env(
        {"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1", "CLAW_DEFAULT_MODEL": "llama3.2"}
    )
    assert spec is not None
    assert spec.kind == "openai_compatible"
    assert spec.base_url == "http://127.0.0.1:11434/v1"
    assert spec.api_key == ""
    assert spec.model == "llama3.2"


def test_no_credentials_provision_nothing():
    assert provider_from_env({}) is None


def test_first_start_creates_provider_model_and_assistant_once(db, monkeypatch):
    tenant = do_create_tenant("Default", slug="default")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert provision_default_agent("default") == "assistant"
    assert provision_default_agent("default") == "assistant"  # a second start creates nothing
    agent = Agent.objects.unscoped().get(tenant=tenant, slug="assistant")
    assert agent.model.model == "gpt-4o-mini"
    assert LLMProvider.objects.unscoped().filter(tenant=tenant).count() == 1
    assert ModelProfile.objects.unscoped().filter(tenant=tenant).count() == 1
    assert LLMProvider.objects.unscoped().get(tenant=tenant).api_key == "sk-test-123"
    assert agent.files.model.objects.unscoped().filter(agent=agent, name="SOUL.md").exists()


def test_an_existing_assistant_is_left_alone(tenant_a):
    spec = provider_from_env({"ANTHROPIC_API_KEY": "sk-ant-x"})
    assert ensure_default_agent(tenant_a.tenant, spec).pk == tenant_a.agent.pk
    assert not LLMProvider.objects.unscoped().filter(tenant=tenant_a.tenant, name="anthropic").exists()
