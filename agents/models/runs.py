"""Runs (R1-R4): one agent turn executed by a worker, its stored events and the
approval requests it waits on.

A Run is created with its Turn when a message arrives and is claimed by a worker
under a lease that the worker's heartbeat extends; an expired lease hands the run to
another worker, which resumes it from the last persisted step.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from claw_platform.tenancy.models import TenantOwned


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


# A session's run that still holds (or waits for) the session's one slot (S6).
ACTIVE_RUN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)
FINISHED_RUN_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


class Run(TenantOwned):
    MEMBER_OWNER = "session__user"  # whose session: the member rule (tenancy.member_rule)

    session = models.ForeignKey("agents.Session", on_delete=models.CASCADE, related_name="runs")
    turn = models.OneToOneField("agents.Turn", on_delete=models.CASCADE, related_name="run")
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="runs")
    agent_revision = models.PositiveIntegerField(
        null=True, blank=True, help_text="The agent's configuration revision when the message arrived."
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # The API key whose request started the run (O1: its usage is charged and reported
    # to the key); empty for the chat, chat platforms and routines.
    api_key = models.ForeignKey(
        "api.ApiKey", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    # The model the run used and why (E22): session (/model), rule (its name) or default.
    # A database default too: the message batch inserts runs with raw SQL.
    model_name = models.CharField(max_length=300, blank=True, default="", db_default="")
    model_route = models.CharField(max_length=120, blank=True, default="", db_default="")
    attempt = models.PositiveIntegerField(default=0, help_text="How many times a worker claimed it.")
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    # The highest RunEvent seq handed out; chunks carry it without advancing it.
    event_seq = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            # S6 in the database: a session never has two runs executing at once.
            models.UniqueConstraint(
                fields=["session"], name="run_one_running_per_session", condition=Q(status="running")
            )
        ]
        indexes = [
            models.Index(
                fields=["status", "id"], name="run_status", condition=Q(status__in=["queued", "running"])
            ),
            models.Index(fields=["session", "status"], name="run_session_status"),
        ]

    def __str__(self) -> str:
        return f"Run {self.pk} ({self.status})"


class RunEvent(TenantOwned):
    """A run event other than chunk/thinking, kept so a reconnecting client can ask
    for everything after the last sequence number it saw."""

    MEMBER_OWNER = "run__session__user"  # whose session: the member rule (tenancy.member_rule)

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=40)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="runevent_unique_seq")]

    def __str__(self) -> str:
        return f"{self.type} #{self.seq}"


class ApprovalStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    DENIED = "denied", "Denied"


class ApprovalRequest(TenantOwned):
    """A tool call that needs a person's yes or no before the run goes on (T5)."""

    MEMBER_OWNER = "run__session__user"  # whose session: the member rule (tenancy.member_rule)

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="approvals")
    call_id = models.CharField(max_length=200)
    tool_name = models.CharField(max_length=200)
    arguments = models.JSONField(default=dict)
    risk = models.CharField(max_length=16, default="medium")
    request_reason = models.TextField(blank=True, help_text="Why the policy asks for approval.")
    # What runs besides the arguments: the scripts a shell call runs (content shown
    # capped, with their sha256, which the approval is bound to) and decoded
    # arguments (tools_app.policy.scripts).
    details = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING)
    always = models.BooleanField(
        default=False, help_text="Approved for the rest of the session: this exact tool with these arguments."
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True, help_text="The decider's reason.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "id"]
        constraints = [models.UniqueConstraint(fields=["run", "call_id"], name="approval_unique_call")]

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.status})"
