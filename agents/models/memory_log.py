"""The memory injection log (M6): for each turn, what recall considered, what it put
into the system prompt and how many tokens that took."""

from __future__ import annotations

from django.db import models

from claw_platform.tenancy.models import TenantOwned


class MemoryInjection(TenantOwned):
    MEMBER_OWNER = "session__user"  # whose session: the member rule (tenancy.member_rule)

    session = models.ForeignKey("agents.Session", on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(
        "agents.Run", on_delete=models.CASCADE, null=True, blank=True, related_name="memory_injections"
    )
    query = models.TextField(blank=True)
    method = models.CharField(max_length=16, help_text="weighted or rrf")
    # [{"id", "vector", "keyword", "score", "selected"}], best first.
    candidates = models.JSONField(default=list)
    selected = models.JSONField(default=list, help_text="The ids of the memories put into the prompt.")
    tokens = models.PositiveIntegerField(default=0)
    is_group = models.BooleanField(default=False, help_text="Personal memory was kept out (group chat).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["tenant", "run"], name="memory_injection_run")]

    def __str__(self) -> str:
        return f"Memory injection {self.pk} ({len(self.selected)} selected)"
