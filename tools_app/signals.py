"""Receivers of the tools app:

- tool configuration changes bump the agent's ``config_version`` (G2), so cached
  agents and the next run see them;
- changes to a tenant's extensions (hooks, MCP servers, HTTP tools, skills, allowed
  hosts) bump its ``ExtensionsVersion`` so every process's cache
  (``tools_app.runtime.config``) sees them on the next run;
- an approval given "always" records the session's grant for that exact call (T12).
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.db.models.signals import m2m_changed, post_delete, post_save
from django.dispatch import receiver

from agents.actions.runs import approval_decided
from agents.models import Agent
from agents.signals import _bump
from tools_app.models import (
    AgentToolConfig,
    AllowedHost,
    ExtensionsVersion,
    Hook,
    HttpTool,
    McpServer,
    Skill,
    ToolSetting,
)
from tools_app.runtime.config import invalidate

EXTENSION_MODELS = (Hook, McpServer, HttpTool, Skill, AllowedHost)


@receiver(post_save, sender=AgentToolConfig)
@receiver(post_delete, sender=AgentToolConfig)
@receiver(post_save, sender=ToolSetting)
@receiver(post_delete, sender=ToolSetting)
def _tool_config_changed(sender: Any, instance: Any, **kwargs: Any) -> None:
    _bump(Agent._base_manager.filter(pk=instance.agent_id))


@receiver(approval_decided)
def _record_always_grant(sender: Any, approval: Any, acting_user: Any, **kwargs: Any) -> None:
    if approval.always and approval.status == "approved":
        from tools_app.actions import do_record_always_approval

        do_record_always_approval(approval, acting_user=acting_user)


def bump_extensions_version(tenant_id: int) -> None:
    if not ExtensionsVersion.objects.filter(tenant_id=tenant_id).update(version=F("version") + 1):
        try:
            with transaction.atomic():
                ExtensionsVersion.objects.create(tenant_id=tenant_id, version=1)
        except IntegrityError:  # created meanwhile by another change: count this one too
            ExtensionsVersion.objects.filter(tenant_id=tenant_id).update(version=F("version") + 1)
    invalidate(tenant_id)


def _changed(sender: Any, instance: Any, **kwargs: Any) -> None:
    if instance.tenant_id is not None:
        bump_extensions_version(instance.tenant_id)


def _agents_changed(sender: Any, instance: Any, action: str, **kwargs: Any) -> None:
    if action in ("post_add", "post_remove", "post_clear") and getattr(instance, "tenant_id", None):
        bump_extensions_version(instance.tenant_id)


for _model in EXTENSION_MODELS:
    receiver(post_save, sender=_model, dispatch_uid=f"ext-saved-{_model.__name__}")(_changed)
    receiver(post_delete, sender=_model, dispatch_uid=f"ext-deleted-{_model.__name__}")(_changed)
    if hasattr(_model, "agents"):
        receiver(m2m_changed, sender=_model.agents.through, dispatch_uid=f"ext-agents-{_model.__name__}")(
            _agents_changed
        )
