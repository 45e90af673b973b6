"""Usage records (O1): one row per LLM call, with its cost (P5)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import models

from claw_platform.tenancy.models import TenantOwned


class UsagePurpose(models.TextChoices):
    AGENT_LOOP = "agent_loop", "Agent loop"
    COMPACTION = "compaction", "Compaction"
    TITLE = "title", "Title"
    SUMMARY = "summary", "Summary"
    FLUSH = "flush", "Memory flush"
    SUB_AGENT = "sub_agent", "Sub-agent"
    DELEGATE = "delegate", "Consulted agent"
    EMBEDDING = "embedding", "Embedding"
    REFLECTION = "reflection", "Memory reflection"
    HEARTBEAT = "heartbeat", "Heartbeat"


class UsageRecord(TenantOwned):
    MEMBER_OWNER = "user"  # whose session: the member rule (tenancy.member_rule)

    agent = models.ForeignKey("agents.Agent", on_delete=models.SET_NULL, null=True, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    session = models.ForeignKey("agents.Session", on_delete=models.SET_NULL, null=True, related_name="+")
    turn = models.ForeignKey("agents.Turn", on_delete=models.SET_NULL, null=True, related_name="+")
    # For a sub-agent's or a consulted agent's calls: the run they were made for, whose
    # budgets they count against (G5, E20).
    parent_run = models.ForeignKey(
        "agents.Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # O1: the run the call was made in (a sub-agent's: its parent's run), the API key
    # that started it, and the routine that fired it.
    run = models.ForeignKey("agents.Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    api_key = models.ForeignKey(
        "api.ApiKey", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    routine = models.ForeignKey(
        "agents.Routine", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    provider = models.CharField(max_length=100)
    model = models.CharField(max_length=200)
    purpose = models.CharField(max_length=16, choices=UsagePurpose.choices, default=UsagePurpose.AGENT_LOOP)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cache_read_tokens = models.PositiveIntegerField(default=0)
    cache_write_tokens = models.PositiveIntegerField(default=0)
    cost = models.DecimalField(max_digits=14, decimal_places=6, default=Decimal(0))
    latency_ms = models.PositiveIntegerField(default=0)
    stop_reason = models.CharField(max_length=32, blank=True)
    error = models.TextField(blank=True)
    # Added into the session's totals yet? Rolled up once per turn, not per step.
    counted = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["tenant", "created_at"], name="usage_tenant_time"),
            models.Index(fields=["session"], name="usage_uncounted", condition=models.Q(counted=False)),
        ]

    def __str__(self) -> str:
        return f"{self.model} {self.purpose} {self.input_tokens}+{self.output_tokens}"

    @classmethod
    def of_call(cls, record: Any, **links: Any) -> UsageRecord:
        """The row for one LLM call's usage ``record`` (``agents.engine``'s), with
        ``links`` naming its tenant, agent, user, session, run ... and ``purpose``
        when the record does not say it."""
        links.setdefault("purpose", getattr(record, "purpose", UsagePurpose.AGENT_LOOP))
        return cls(
            provider=record.provider[:100],
            model=record.model[:200],
            input_tokens=record.input_tokens,
            output_tokens=record.output_tokens,
            cache_read_tokens=record.cache_read_tokens,
            cache_write_tokens=record.cache_write_tokens,
            cost=record.cost,
            latency_ms=record.latency_ms,
            stop_reason=record.stop_reason[:32],
            error=record.error,
            **links,
        )
