"""Routines (C1-C7, T6): scheduled work, fired by the scheduler inside the workers
(``agents.routines``).

Triggers: ``cron`` (a five-field expression evaluated in ``timezone``), ``interval``
(every ``interval_seconds``), ``once`` (at ``run_at``) and ``manual`` (run now only).
A due time becomes one :class:`RoutineFire` row, unique per (routine, scheduled time),
which one worker claims and starts exactly once; every attempt leaves a
:class:`RoutineRun` in the routine's history.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from claw_platform.crypto import EncryptedTextField
from claw_platform.tenancy.models import TenantOwned


class TriggerKind(models.TextChoices):
    CRON = "cron", "Cron expression"
    INTERVAL = "interval", "Every N seconds"
    ONCE = "once", "Once, at a time"
    MANUAL = "manual", "Only when run by hand"
    EVENT = "event", "On an event"


class EventKind(models.TextChoices):
    MESSAGE = "message", "A message matching a pattern in the agent's sessions"
    RUN_FAILED = "run_failed", "A run of the agent failed"
    APPROVAL_WAITING = "approval_waiting", "An approval waiting longer than N minutes"


class ActionKind(models.TextChoices):
    AGENT = "agent", "Agent prompt (full run in a session)"
    LIGHT = "light", "Light run (fresh session, no history)"
    SHELL = "shell", "Shell command (sandboxed, gated)"
    HEARTBEAT = "heartbeat", "Heartbeat (the agent's HEARTBEAT.md check, from its settings)"


class MissedPolicy(models.TextChoices):
    SKIP = "skip", "Skip missed runs"
    RUN_ONCE = "run_once", "Run once for all missed runs"
    RUN_ALL = "run_all", "Run each missed run (capped)"


class OverlapPolicy(models.TextChoices):
    SKIP = "skip", "Skip while the previous run is going"
    QUEUE_ONE = "queue_one", "Queue one run behind it"
    ALLOW = "allow", "Allow"


class RoutineStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    PAUSED = "paused", "Paused"
    CANCELLED = "cancelled", "Cancelled"
    COMPLETED = "completed", "Completed"


class Routine(TenantOwned):
    MEMBER_OWNER = "user"  # a member sees only the routines that act for them

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
    event_kind = models.CharField(max_length=32, choices=EventKind.choices, blank=True)
    event_pattern = models.CharField(
        max_length=300,
        blank=True,
        help_text="Message events: a regular expression (case-insensitive) the message must match.",
    )
    event_wait_minutes = models.PositiveIntegerField(
        null=True, blank=True, help_text="Approval events: minutes an approval waits before it counts."
    )
    event_cursor = models.DateTimeField(
        null=True, blank=True, help_text="Events up to here were looked at (event routines)."
    )
    action = models.CharField(max_length=16, choices=ActionKind.choices, default=ActionKind.AGENT)
    command = models.TextField(blank=True, help_text="Shell routines: the command (one simple command).")
    missed_policy = models.CharField(
        max_length=16,
        choices=MissedPolicy.choices,
        default=MissedPolicy.RUN_ONCE,
        help_text="Runs missed while no worker ran (downtime).",
    )
    catchup_window_seconds = models.PositiveIntegerField(
        default=86_400, help_text="Missed runs older than this are dropped, whatever the policy."
    )
    max_catchup_runs = models.PositiveSmallIntegerField(
        default=3, help_text="run_all replays at most this many."
    )
    overlap_policy = models.CharField(
        max_length=16,
        choices=OverlapPolicy.choices,
        default=OverlapPolicy.SKIP,
        help_text="When a run is due while the previous one is still going.",
    )
    jitter_seconds = models.PositiveIntegerField(
        default=0,
        help_text="Start up to this many seconds late: the same offset every time for this routine.",
    )
    max_retries = models.PositiveSmallIntegerField(default=2)
    retry_backoff_seconds = models.PositiveIntegerField(
        default=30, help_text="The first retry's delay; doubled each time, with jitter."
    )
    timeout_seconds = models.PositiveIntegerField(default=900, help_text="A run going longer is failed.")
    max_runs_per_hour = models.PositiveSmallIntegerField(
        default=60, help_text="Checked before a run starts; a run over it is skipped."
    )
    pause_after_failures = models.PositiveSmallIntegerField(
        default=5, help_text="Pause after this many consecutive failed runs (0: never)."
    )
    consecutive_failures = models.PositiveIntegerField(default=0)
    deliver_channel = models.ForeignKey(
        "channels_app.Channel",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="Also send the output to this chat-platform channel …",
    )
    deliver_target = models.CharField(max_length=200, blank=True, help_text="… to this chat id on it.")
    webhook_url = models.URLField(
        max_length=500, blank=True, help_text="Also POST the output here (signed, through the SSRF guard)."
    )
    webhook_secret = EncryptedTextField(
        blank=True, default="", help_text="Signs webhook deliveries (X-Claw-Signature); never shown."
    )
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


class FireState(models.TextChoices):
    PENDING = "pending", "Pending"
    STARTED = "started", "Started"
    DONE = "done", "Done"


class RoutineFire(TenantOwned):
    """One due time of a routine: created once (unique per routine and time), claimed
    by one worker (``FOR UPDATE SKIP LOCKED``) and started in the same transaction
    that marks it started, so a worker killed mid-fire leaves it pending, never half
    started, and a second worker never starts it again."""

    MEMBER_OWNER = "routine__user"

    routine = models.ForeignKey(Routine, on_delete=models.CASCADE, related_name="fires")
    scheduled_for = models.DateTimeField()
    not_before = models.DateTimeField(help_text="Due time plus jitter, stagger or retry backoff.")
    reason = models.CharField(max_length=16, default="schedule")  # schedule, catch_up, manual, event, retry
    event_key = models.CharField(
        max_length=120, blank=True, default="", help_text="Event fires: the event (once per routine)."
    )
    event_detail = models.TextField(blank=True, default="", help_text="Event fires: what happened.")
    state = models.CharField(max_length=16, choices=FireState.choices, default=FireState.PENDING)
    attempt = models.PositiveSmallIntegerField(default=0)
    started_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["routine", "scheduled_for"], name="routine_fire_once", condition=Q(event_key="")
            ),
            models.UniqueConstraint(
                fields=["routine", "event_key"], name="routine_fire_event_once", condition=~Q(event_key="")
            ),
        ]
        indexes = [
            models.Index(fields=["not_before"], name="routine_fire_due", condition=Q(state="pending")),
        ]

    def __str__(self) -> str:
        return f"{self.routine_id} @ {self.scheduled_for.isoformat()}"


class RoutineRunStatus(models.TextChoices):
    RUNNING = "running", "Running"
    OK = "ok", "OK"
    FAILED = "failed", "Failed"
    REFUSED = "refused", "Refused"
    SKIPPED = "skipped", "Skipped"


class RoutineRun(TenantOwned):
    MEMBER_OWNER = "routine__user"

    routine = models.ForeignKey(Routine, on_delete=models.CASCADE, related_name="runs")
    fire = models.ForeignKey(RoutineFire, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    attempt = models.PositiveSmallIntegerField(default=0)
    scheduled_for = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=RoutineRunStatus.choices)
    reason = models.CharField(max_length=200, blank=True, help_text="Why skipped, refused or failed.")
    output = models.TextField(blank=True)
    run = models.ForeignKey("agents.Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    cost = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    delivery = models.CharField(
        max_length=500, blank=True, help_text="Where the output went, and each destination's failure."
    )
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [
            models.Index(fields=["routine", "-started_at"], name="routine_run_history"),
            models.Index(fields=["status"], name="routine_run_going", condition=Q(status="running")),
        ]

    def __str__(self) -> str:
        return f"{self.routine_id} {self.status}"
