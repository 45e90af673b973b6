"""Agents resolved from the database into plain runtime data, cached (G2).

Each process keeps resolved agents for a short TTL. Saving an agent, one of its
files, its model profiles or their providers bumps ``Agent.config_version`` (see
``agents/signals.py``); a cache hit costs one indexed query for that number, so a
change made in the admin applies to the very next run in every process, without a
restart and without a pub/sub hop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents.engine.cost import ModelPrice
from agents.engine.routing import ClassificationRule
from agents.models import Agent, AgentDelegation, AgentFile, AgentRole, ModelProfile, RoutingRule
from claw_platform.prepared import prepared_cursor
from claw_platform.versioned_cache import VersionedCache

CACHE_TTL_SECONDS = 300.0


@dataclass(frozen=True)
class ModelConfig:
    """A model profile with its provider's connection settings, as plain data."""

    profile_id: int
    model: str
    label: str
    provider_id: int
    provider_name: str
    provider_kind: str
    base_url: str
    api_key: str = field(repr=False)
    extra_headers: dict[str, str]
    body_overrides: dict[str, Any]
    timeout_seconds: int
    max_retries: int
    price: ModelPrice
    context_window: int
    max_output_tokens: int
    supports_tools: bool
    supports_vision: bool
    supports_thinking: bool

    @property
    def display_name(self) -> str:
        return self.label or f"{self.provider_name}:{self.model}"


@dataclass(frozen=True)
class DelegateLink:
    """An agent this one may consult or hand off to (G5)."""

    target_id: int
    slug: str
    name: str
    description: str
    consult: bool
    handoff: bool


@dataclass(frozen=True)
class RouteRule:
    """One routing rule (E22): when ``rule`` matches a message of ``channel`` (empty:
    any), the turn uses ``model``."""

    name: str
    channel: str
    rule: ClassificationRule
    model: ModelConfig


@dataclass(frozen=True)
class ResolvedAgent:
    agent_id: int
    tenant_id: int
    version: int
    slug: str
    name: str
    description: str
    agent_type: str
    role: str
    model: ModelConfig
    cheap_model: ModelConfig | None
    temperature: float
    max_iterations: int
    parallel_tools: bool
    history_turn_limit: int | None
    time_budget_seconds: int
    compaction_message_threshold: int
    compaction_trigger_ratio: float
    compaction_keep_recent: int
    input_guard_mode: str
    show_thinking: bool
    busy_policy: str
    timezone: str
    enabled: bool
    # (user id or None, file name) -> content
    files: dict[tuple[int | None, str], str]
    trace_verbose: bool = False
    auto_compact_tokens: int | None = None
    stop_after_tokens: int | None = None
    delegates: tuple[DelegateLink, ...] = ()
    routes: tuple[RouteRule, ...] = ()
    # The tenant's title and summarizer agents' models, when it has such agents (G4).
    title_model: ModelConfig | None = None
    summary_model: ModelConfig | None = None

    @property
    def light_title_model(self) -> ModelConfig | None:
        """Titles: the tenant's title agent, else the cheap model (else the main one)."""
        return self.title_model or self.cheap_model

    @property
    def light_summary_model(self) -> ModelConfig | None:
        """Summaries: the tenant's summarizer agent, else the cheap model (else the main one)."""
        return self.summary_model or self.cheap_model

    def context_files(self, user_id: int | None) -> dict[str, str]:
        """The agent's files with the user's own copies taking precedence (G3)."""
        files = {name: content for (owner, name), content in self.files.items() if owner is None}
        if user_id is not None:
            files.update({name: content for (owner, name), content in self.files.items() if owner == user_id})
        return files


class AgentNotFound(LookupError):
    pass


_cache: VersionedCache[int, ResolvedAgent] = VersionedCache(CACHE_TTL_SECONDS)


def resolve_agent(agent_id: int) -> ResolvedAgent:
    """The agent's current configuration (from cache when still current)."""
    with prepared_cursor() as cursor:  # for every run: a plain statement
        cursor.execute("SELECT config_version FROM agents_agent WHERE id = %s", [agent_id])
        row = cursor.fetchone()
    version = row[0] if row is not None else None
    if version is None:
        invalidate(agent_id)
        raise AgentNotFound(agent_id)
    hit = cached_agent(agent_id, version)
    if hit is not None:
        return hit
    resolved = _load(agent_id)
    _cache.put(agent_id, resolved.version, resolved)
    return resolved


def cached_agent(agent_id: int, version: int | None) -> ResolvedAgent | None:
    """The agent from this process's cache if it is at ``version`` (read by the
    caller, ``agents.runtime.run_facts``), else None: ask :func:`resolve_agent`."""
    return _cache.get(agent_id, version) if version is not None else None


def invalidate(agent_id: int | None = None) -> None:
    """Drop one cached agent (or all): this process's half of invalidation."""
    _cache.invalidate(agent_id)


def _load(agent_id: int) -> ResolvedAgent:
    agent = (
        Agent._base_manager.select_related("model__provider", "cheap_model__provider")
        .filter(pk=agent_id)
        .first()
    )
    if agent is None:
        raise AgentNotFound(agent_id)
    files: dict[tuple[int | None, str], str] = {
        (user_id, name): content
        for user_id, name, content in AgentFile._base_manager.filter(agent_id=agent_id).values_list(
            "user_id", "name", "content"
        )
    }
    return ResolvedAgent(
        agent_id=agent.pk,
        tenant_id=agent.tenant_id,
        version=agent.config_version,
        slug=agent.slug,
        name=agent.name,
        description=agent.description,
        agent_type=agent.agent_type,
        role=agent.role,
        model=model_config(agent.model),  # type: ignore[arg-type]  # non-null FK
        cheap_model=model_config(agent.cheap_model) if agent.cheap_model is not None else None,
        temperature=float(agent.temperature),
        max_iterations=agent.max_iterations,
        parallel_tools=agent.parallel_tools,
        history_turn_limit=agent.history_turn_limit,
        time_budget_seconds=agent.time_budget_seconds,
        compaction_message_threshold=agent.compaction_message_threshold,
        compaction_trigger_ratio=float(agent.compaction_trigger_ratio),
        compaction_keep_recent=agent.compaction_keep_recent,
        input_guard_mode=agent.input_guard_mode,
        show_thinking=agent.show_thinking,
        busy_policy=agent.busy_policy,
        timezone=agent.timezone,
        enabled=agent.enabled,
        files=files,
        trace_verbose=agent.trace_verbose,
        auto_compact_tokens=agent.auto_compact_tokens,
        stop_after_tokens=agent.stop_after_tokens,
        delegates=_delegates(agent),
        routes=_routes(agent),
        title_model=_role_model(agent.tenant_id, AgentRole.TITLE),
        summary_model=_role_model(agent.tenant_id, AgentRole.SUMMARIZER),
    )


def _role_model(tenant_id: int, role: str) -> ModelConfig | None:
    """The model of the tenant's (first enabled) agent with ``role``, if any."""
    agent = (
        Agent._base_manager.select_related("model__provider")
        .filter(tenant_id=tenant_id, role=role, enabled=True, model__tenant_id=tenant_id)
        .order_by("id")
        .first()
    )
    return model_config(agent.model) if agent is not None else None


def _delegates(agent: Agent) -> tuple[DelegateLink, ...]:
    links = (
        AgentDelegation._base_manager.select_related("target")
        .filter(agent_id=agent.pk, tenant_id=agent.tenant_id, target__tenant_id=agent.tenant_id)
        .order_by("id")
    )
    return tuple(
        DelegateLink(
            target_id=link.target_id,
            slug=link.target.slug,
            name=link.target.name,
            description=link.description or link.target.description,
            consult=link.allows_consult,
            handoff=link.allows_handoff,
        )
        for link in links
    )


def _words(text: str, *, commas: bool) -> tuple[str, ...]:
    pieces = text.replace(",", "\n").splitlines() if commas else text.splitlines()
    return tuple(p.strip() for p in pieces if p.strip())


def _routes(agent: Agent) -> tuple[RouteRule, ...]:
    rules = (
        RoutingRule._base_manager.select_related("model__provider")
        .filter(agent_id=agent.pk, tenant_id=agent.tenant_id, enabled=True, model__tenant_id=agent.tenant_id)
        .order_by("-priority", "id")
    )
    return tuple(
        RouteRule(
            name=rule.name,
            channel=rule.channel.strip(),
            rule=ClassificationRule(
                hint=str(rule.pk),
                keywords=_words(rule.keywords, commas=True),
                patterns=_words(rule.patterns, commas=False),
                min_length=rule.min_length,
                max_length=rule.max_length,
                priority=rule.priority,
            ),
            model=model_config(rule.model),
        )
        for rule in rules
    )


def model_config(profile: ModelProfile) -> ModelConfig:
    provider = profile.provider
    return ModelConfig(
        profile_id=profile.pk,
        model=profile.model,
        label=profile.label,
        provider_id=provider.pk,
        provider_name=provider.name,
        provider_kind=provider.kind,
        base_url=provider.base_url,
        api_key=provider.api_key or "",
        extra_headers=dict(provider.extra_headers or {}),
        body_overrides=dict(provider.body_overrides or {}),
        timeout_seconds=provider.timeout_seconds,
        max_retries=provider.max_retries,
        price=ModelPrice.per_million(
            input=profile.input_price,
            output=profile.output_price,
            cache_read=profile.cache_read_price,
            cache_write=profile.cache_write_price,
        ),
        context_window=profile.context_window,
        max_output_tokens=profile.max_output_tokens,
        supports_tools=profile.supports_tools,
        supports_vision=profile.supports_vision,
        supports_thinking=profile.supports_thinking,
    )


def tenant_models(tenant_id: int) -> list[ModelConfig]:
    """Every model profile of a tenant whose provider is enabled (/models)."""
    profiles = (
        ModelProfile._base_manager.select_related("provider")
        .filter(tenant_id=tenant_id, provider__enabled=True)
        .order_by("provider__name", "model")
    )
    return [model_config(p) for p in profiles]
