"""Agents and their context files (G1, G3)."""

from __future__ import annotations

import zoneinfo
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator, MaxValueValidator, MinValueValidator
from django.db import models

from claw_platform.tenancy.models import TenantOwned

MAX_CONTEXT_FILE_CHARS = 20_000
CONTEXT_FILE_NAMES = (
    "SOUL.md",
    "IDENTITY.md",
    "AGENTS.md",
    "TOOLS.md",
    "USER.md",
    "HEARTBEAT.md",
    "BOOTSTRAP.md",
    "MEMORY.md",
    "DELEGATION.md",
    "TEAM.md",
)


class AgentType(models.TextChoices):
    OPEN = "open", "Open (per-user context and workspace)"
    PREDEFINED = "predefined", "Predefined (shared context and workspace)"


class AgentRole(models.TextChoices):
    MAIN = "main", "Main"
    TASK = "task", "Task (sub-agent, read-only tools)"
    SUMMARIZER = "summarizer", "Summarizer"
    TITLE = "title", "Title"


class InputGuardMode(models.TextChoices):
    OFF = "off", "Off"
    LOG = "log", "Log"
    WARN = "warn", "Warn"
    BLOCK = "block", "Block"


class BusyPolicy(models.TextChoices):
    QUEUE = "queue", "Queue behind the active run"
    INTERRUPT = "interrupt", "Interrupt the active run"


def validate_time_zone(value: str) -> None:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValidationError(
            f"Unknown time zone {value!r}; use an IANA name such as Europe/Paris."
        ) from None


class HeartbeatNotify(models.TextChoices):
    SESSION = "session", "The user's Heartbeat chat only"
    LINKED = "linked", "The Heartbeat chat and the user's linked chat accounts on this agent's channels"
    LINKED_EMAIL = (
        "linked_email",
        "The Heartbeat chat, the user's linked chat accounts and their e-mail address "
        "(sent by this agent's e-mail channel)",
    )


class Agent(TenantOwned):
    slug = models.SlugField(max_length=64)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    agent_type = models.CharField(max_length=16, choices=AgentType.choices, default=AgentType.OPEN)
    role = models.CharField(max_length=16, choices=AgentRole.choices, default=AgentRole.MAIN)
    model = models.ForeignKey("agents.ModelProfile", on_delete=models.PROTECT, related_name="+")
    cheap_model = models.ForeignKey(
        "agents.ModelProfile",
        on_delete=models.PROTECT,
        related_name="+",
        null=True,
        blank=True,
        help_text="Used for titles, summaries and heartbeats; falls back to the main model.",
    )
    temperature = models.DecimalField(
        max_digits=3,
        decimal_places=2,
        default=Decimal("0.70"),
        validators=[MinValueValidator(Decimal("0")), MaxValueValidator(Decimal("2"))],
    )
    max_iterations = models.PositiveIntegerField(
        default=20,
        validators=[MinValueValidator(1), MaxValueValidator(200)],
        help_text="LLM calls per run before the run stops with a clear message.",
    )
    parallel_tools = models.BooleanField(
        default=True, help_text="Run several tool calls of one response at once."
    )
    history_turn_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Keep only the last N user turns in requests (empty: all).",
    )
    time_budget_seconds = models.PositiveIntegerField(
        default=600,
        validators=[MinValueValidator(5), MaxValueValidator(86_400)],
        help_text="A run that takes longer ends with a timed-out note.",
    )
    compaction_message_threshold = models.PositiveIntegerField(
        default=50,
        validators=[MinValueValidator(4)],
        help_text="Compact when the history holds more messages than this.",
    )
    compaction_trigger_ratio = models.DecimalField(
        max_digits=3,
        decimal_places=2,
        default=Decimal("0.75"),
        validators=[MinValueValidator(Decimal("0.10")), MaxValueValidator(Decimal("0.95"))],
        help_text="Compact when the history fills this share of the context window.",
    )
    compaction_keep_recent = models.PositiveIntegerField(
        default=4,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Messages kept verbatim after a compaction.",
    )
    input_guard_mode = models.CharField(
        max_length=8, choices=InputGuardMode.choices, default=InputGuardMode.WARN
    )
    show_thinking = models.BooleanField(default=False)
    trace_verbose = models.BooleanField(
        default=False,
        help_text="Keep each LLM call's and tool call's inputs and outputs in the run's trace "
        "(up to 50,000 characters each); otherwise only a 500-character preview of outputs.",
    )
    # Run middleware (E25), installed when set.
    auto_compact_tokens = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1_000)],
        help_text="Auto-compact middleware: compact mid-run once the context reaches this many "
        "tokens (OpenCode uses 200000). Empty: off.",
    )
    stop_after_tokens = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Stop middleware: a run ends with a note once it has used this many tokens "
        "(input + output, sub-agents and consulted agents included). Empty: off.",
    )
    busy_policy = models.CharField(max_length=16, choices=BusyPolicy.choices, default=BusyPolicy.QUEUE)
    timezone = models.CharField(max_length=64, default="UTC", validators=[validate_time_zone])
    # The periodic heartbeat (C8): a routine of kind heartbeat kept in step with these
    # fields (agents.routines.heartbeat_schedule), fired by the routine scheduler.
    heartbeat_enabled = models.BooleanField(
        default=False,
        help_text="Check HEARTBEAT.md (the agent's and each user's) every interval; the user is told "
        "only when something needs attention.",
    )
    heartbeat_interval_minutes = models.PositiveIntegerField(
        default=30,
        validators=[MinValueValidator(5), MaxValueValidator(1_440)],
        help_text="Minutes between heartbeats (default 30, as IronClaw and OpenClaw).",
    )
    heartbeat_active_start = models.TimeField(
        null=True,
        blank=True,
        help_text="Active hours, in the agent's time zone: heartbeats run from this time … (empty: all day).",
    )
    heartbeat_active_end = models.TimeField(
        null=True,
        blank=True,
        help_text="… until this time (may be past midnight, e.g. 22:00 to 06:00; empty: all day).",
    )
    heartbeat_notify = models.CharField(
        max_length=16,
        choices=HeartbeatNotify.choices,
        default=HeartbeatNotify.LINKED,
        help_text="Where a finding is told: always the user's Heartbeat chat; with 'linked', also "
        "each chat account (Telegram, Slack, email …) the user linked on this agent's channels; with "
        "'linked_email', also the user's e-mail address, through the agent's e-mail channel.",
    )
    enabled = models.BooleanField(default=True)
    # Bumped whenever the agent, its files, its models or their providers change, so
    # every process's agent cache can tell a stale entry with one cheap query (G2).
    config_version = models.PositiveIntegerField(default=1, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    # Bookkeeping that audit diffs and revisions leave out.
    AUDIT_EXCLUDE = frozenset({"config_version"})

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "slug"], name="agent_unique_slug")]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors = {}
        for field in ("model", "cheap_model"):
            profile = getattr(self, field, None) if getattr(self, f"{field}_id") else None
            if profile is not None and self.tenant_id and profile.tenant_id != self.tenant_id:
                errors[field] = "This model belongs to another tenant."
        if (self.heartbeat_active_start is None) != (self.heartbeat_active_end is None):
            missing = (
                "heartbeat_active_end" if self.heartbeat_active_end is None else "heartbeat_active_start"
            )
            errors[missing] = "Set both ends of the active hours, or neither (all day)."
        if errors:
            raise ValidationError(errors)


class AgentFile(TenantOwned):
    """A context file of an agent; with ``user`` set, that user's own copy (G3)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="files")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        help_text="Empty for the agent's own file; set for one user's copy.",
    )
    name = models.CharField(max_length=32, choices=[(n, n) for n in CONTEXT_FILE_NAMES])
    content = models.TextField(blank=True, validators=[MaxLengthValidator(MAX_CONTEXT_FILE_CHARS)])
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["agent_id", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "user", "name"], name="agentfile_unique_name", nulls_distinct=False
            )
        ]

    def __str__(self) -> str:
        return f"{self.agent_id}/{self.name}" + (f" (user {self.user_id})" if self.user_id else "")

    def save(self, *args: object, **kwargs: object) -> None:
        if self.tenant_id is None and self.agent_id:
            self.tenant_id = self.agent.tenant_id
        # A browser's textarea sends \r\n: prompt files are stored with \n only, so a
        # revision's diff and the prompt the model gets never carry stray \r.
        self.content = (self.content or "").replace("\r\n", "\n").replace("\r", "\n")
        super().save(*args, **kwargs)  # type: ignore[arg-type]
