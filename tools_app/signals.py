"""Changes to a tenant's extensions bump its ``ExtensionsVersion`` so every process's
cache (``tools_app.runtime.config``) sees them on the next run."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.db.models.signals import m2m_changed, post_delete, post_save
from django.dispatch import receiver

from tools_app.models import AllowedHost, ExtensionsVersion, Hook, HttpTool, McpServer, Skill
from tools_app.runtime.config import invalidate

EXTENSION_MODELS = (Hook, McpServer, HttpTool, Skill, AllowedHost)


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
