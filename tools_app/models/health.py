"""Self-repair (R3): a tool that keeps failing for an agent is flagged.

Each call's outcome updates the (agent, tool) row: a failure of the tool itself
(an error, a timeout, a process that could not start, an MCP server's error or open
circuit) counts one more in a row; a call that works resets the count. At
``CLAW_TOOL_FLAG_AFTER_FAILURES`` in a row the tool is flagged (an audit row, the
admin's list, a mark on the agent's tool settings) and, with
``CLAW_TOOL_FLAGGED_LEFT_OUT`` on, left out of the model's tools until an admin
clears the flag.
"""

from __future__ import annotations

from django.db import models

from claw_platform.tenancy.models import TenantOwned


class ToolHealth(TenantOwned):
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="tool_health")
    tool = models.CharField(max_length=200)
    consecutive_failures = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    last_failed_at = models.DateTimeField(null=True, blank=True)
    flagged_at = models.DateTimeField(
        null=True, blank=True, help_text="Failed too often in a row; cleared by an admin."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "tool health"
        verbose_name_plural = "tool health"
        ordering = ["agent_id", "tool"]
        constraints = [models.UniqueConstraint(fields=["agent", "tool"], name="tool_health_one_per_tool")]
        indexes = [
            models.Index(
                fields=["agent"], name="tool_health_flagged", condition=models.Q(flagged_at__isnull=False)
            )
        ]

    def __str__(self) -> str:
        return f"{self.tool} ({'flagged' if self.flagged_at else 'ok'})"
