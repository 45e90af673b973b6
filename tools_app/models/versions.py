"""A per-tenant counter of extension configuration changes (for the runtime cache)."""

from __future__ import annotations

from django.db import models

from claw_platform.tenancy.models import Tenant


class ExtensionsVersion(models.Model):
    """Bumped whenever a tenant's hooks, MCP servers, HTTP tools, skills or allowed hosts
    change (``tools_app/signals.py``). A process's cached configuration is current while
    its version matches: one indexed read per run, no pub/sub (as agents' G2 cache)."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, primary_key=True, related_name="+")
    version = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"tenant {self.tenant_id} extensions v{self.version}"
