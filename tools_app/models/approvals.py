"""The "always" approvals (T12): a person's yes that covers the same call again in the
same session, bound to the exact tool and the full canonical arguments."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from claw_platform.tenancy.models import TenantOwned


class ToolApprovalGrant(TenantOwned):
    MEMBER_OWNER = "session__user"  # whose session: the member rule (tenancy.member_rule)

    session = models.ForeignKey("agents.Session", on_delete=models.CASCADE, related_name="+")
    tool_name = models.CharField(max_length=200)
    # sha256 of the canonical JSON of the arguments (see tools_app.policy.approval).
    arguments_digest = models.CharField(max_length=64)
    arguments = models.JSONField(default=dict)
    approval = models.ForeignKey(
        "agents.ApprovalRequest", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "tool_name", "arguments_digest"], name="grant_unique_call"
            )
        ]

    def __str__(self) -> str:
        return f"always {self.tool_name} ({self.arguments_digest[:8]})"
