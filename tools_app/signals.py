"""Tool configuration changes bump the agent's ``config_version`` (G2), so cached
agents and the next run see them."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from agents.actions.runs import approval_decided
from agents.models import Agent
from agents.signals import _bump
from tools_app.models import AgentToolConfig, ToolSetting


@receiver(post_save, sender=AgentToolConfig)
@receiver(post_delete, sender=AgentToolConfig)
@receiver(post_save, sender=ToolSetting)
@receiver(post_delete, sender=ToolSetting)
def _tool_config_changed(sender: Any, instance: Any, **kwargs: Any) -> None:
    _bump(Agent._base_manager.filter(pk=instance.agent_id))


@receiver(approval_decided)
def _record_always_grant(sender: Any, approval: Any, acting_user: Any, **kwargs: Any) -> None:
    """An approval given "always" allows the same call (tool + arguments) for the rest
    of the session (T12)."""
    if approval.always and approval.status == "approved":
        from tools_app.actions import do_record_always_approval

        do_record_always_approval(approval, acting_user=acting_user)
