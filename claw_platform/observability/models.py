"""Stored spans of run traces (O4)."""

from __future__ import annotations

from django.db import models

from claw_platform.tenancy.models import TenantOwned


class Span(TenantOwned):
    """One span of a run's trace: the run itself (``invoke_agent``), an LLM call
    (``chat``), a tool call (``execute_tool``), a hook, a memory recall or a
    sub-agent. Written when the run's execution ends (agents/engine/tracing.py
    collects them)."""

    MEMBER_OWNER = "run__session__user"  # whose session: the member rule (tenancy.member_rule)

    run = models.ForeignKey("agents.Run", on_delete=models.CASCADE, related_name="spans")
    trace_id = models.CharField(max_length=32, db_index=True)
    span_id = models.CharField(max_length=16)
    parent_span_id = models.CharField(max_length=16, blank=True)
    name = models.CharField(max_length=300)
    kind = models.CharField(max_length=16)
    started_at = models.DateTimeField()
    duration_ms = models.FloatField(default=0)
    status = models.CharField(max_length=8, default="ok")
    error = models.TextField(blank=True)
    attributes = models.JSONField(default=dict, blank=True)
    input = models.TextField(blank=True)
    output = models.TextField(blank=True)

    class Meta:
        ordering = ["run_id", "started_at", "id"]
        indexes = [models.Index(fields=["run", "started_at"], name="span_run_time")]
        constraints = [models.UniqueConstraint(fields=["trace_id", "span_id"], name="span_unique_id")]

    def __str__(self) -> str:
        return self.name
