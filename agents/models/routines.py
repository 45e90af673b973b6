"""Routines (C1, T6): stored scheduled work. ``schedule_task`` creates them; firing
them is the routines issue's work, which reads ``next_run_at`` and writes RoutineRun.

Triggers: ``cron`` (a five-field expression evaluated in ``timezone``), ``interval``
(every ``interval_seconds``) and ``once`` (at ``run_at``).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from claw_platform.tenancy.models import TenantOwned


class TriggerKind(models.TextChoices):
    CRON = "cron", "Cron expression"
    INTERVAL = "interval", "Every N seconds"
    ONCE = "once", "Once, at a time"


class RoutineStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    PAUSED = "paused", "Paused"
    CANCELLED = "cancelled", "Cancelled"
    COMPLETED = "completed", "Completed"


class Routine(TenantOwned):
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="routines")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        help_text="The user the routine acts for (its runs use this user's role and workspace).",
    )
    session = models.ForeignKey(
        "agents.Session",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="Where the output is delivered; the session that scheduled it.",
    )
    name = models.CharField(max_length=200)
    prompt = models.TextField()
    trigger = models.CharField(max_length=16, choices=TriggerKind.choices)
    cron = models.CharField(max_length=120, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    interval_seconds = models.PositiveIntegerField(null=True, blank=True)
    run_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=RoutineStatus.choices, default=RoutineStatus.ACTIVE)
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_status = models.CharField(max_length=16, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["next_run_at", "id"]
        indexes = [
            models.Index(fields=["next_run_at"], name="routine_due", condition=Q(status="active")),
        ]

    def __str__(self) -> str:
        return self.name


class RoutineRun(TenantOwned):
    routine = models.ForeignKey(Routine, on_delete=models.CASCADE, related_name="runs")
    status = models.CharField(max_length=16)
    output = models.TextField(blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"{self.routine_id} {self.status}"
