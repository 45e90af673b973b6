"""Agent configuration revisions (Z6): every save is a revision with a diff and a restore."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from claw_platform.tenancy.models import TenantOwned


class AgentRevision(TenantOwned):
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    snapshot = models.JSONField(help_text="The agent's settings and context files at this revision.")
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent_id", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "number"], name="agentrevision_unique_number")
        ]

    def __str__(self) -> str:
        return f"{self.agent} r{self.number}"
