"""Configuration changes bump ``Agent.config_version`` so every process's agent cache
sees them on the next run (G2)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from agents.models import Agent, AgentDelegation, AgentFile, LLMProvider, ModelProfile, RoutingRule
from agents.runtime.resolution import invalidate


def _bump(agents: Any) -> None:
    ids = list(agents.values_list("pk", flat=True))
    if ids:
        Agent._base_manager.filter(pk__in=ids).update(config_version=F("config_version") + 1)
        for agent_id in ids:
            invalidate(agent_id)


@receiver(post_save, sender=Agent)
def _agent_saved(sender: Any, instance: Agent, **kwargs: Any) -> None:
    # Every agent of the tenant: those that list this one as a delegate show its name
    # and description, and all use the tenant's title and summarizer agents (G4).
    _bump(Agent._base_manager.filter(tenant_id=instance.tenant_id))
    if kwargs.get("created") and not instance.heartbeat_enabled:
        return
    from agents.routines.heartbeat_schedule import sync_heartbeat_routine

    sync_heartbeat_routine(instance)  # the periodic heartbeat follows the agent's settings (C8)


@receiver(post_save, sender=AgentDelegation)
@receiver(post_delete, sender=AgentDelegation)
@receiver(post_save, sender=RoutingRule)
@receiver(post_delete, sender=RoutingRule)
def _team_config_changed(sender: Any, instance: Any, **kwargs: Any) -> None:
    _bump(Agent._base_manager.filter(pk=instance.agent_id))


@receiver(post_save, sender=AgentFile)
@receiver(post_delete, sender=AgentFile)
def _file_changed(sender: Any, instance: AgentFile, **kwargs: Any) -> None:
    _bump(Agent._base_manager.filter(pk=instance.agent_id))


@receiver(post_save, sender=ModelProfile)
@receiver(post_delete, sender=ModelProfile)
def _model_changed(sender: Any, instance: ModelProfile, **kwargs: Any) -> None:
    _bump(
        Agent._base_manager.filter(
            Q(model_id=instance.pk) | Q(cheap_model_id=instance.pk) | Q(routing_rules__model_id=instance.pk)
        ).distinct()
    )


@receiver(post_save, sender=ModelProfile)
@receiver(post_delete, sender=ModelProfile)
@receiver(post_save, sender=LLMProvider)
def _memory_embedder_may_have_changed(sender: Any, instance: Any, **kwargs: Any) -> None:
    # A tenant's memory embedder is its embedding profile marked use_for_memory (P7):
    # when that changes, its memories are re-embedded in the background.
    from agents.memory.embedding import sync_memory_embedder

    tenant_id = instance.tenant_id
    transaction.on_commit(lambda: sync_memory_embedder(tenant_id))


@receiver(post_save, sender=LLMProvider)
def _provider_changed(sender: Any, instance: LLMProvider, **kwargs: Any) -> None:
    _bump(
        Agent._base_manager.filter(
            Q(model__provider_id=instance.pk)
            | Q(cheap_model__provider_id=instance.pk)
            | Q(routing_rules__model__provider_id=instance.pk)
        ).distinct()
    )
