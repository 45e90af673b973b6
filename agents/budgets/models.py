"""Budgets, reservations, alerts, kill switches and a tenant's spend settings.

A :class:`Budget` row is both the rule (a money limit per period, a call rate per
hour) and its live counters (spent and reserved this period, calls this hour): the
guard locks the rows that apply to a call (``SELECT … FOR UPDATE``) and checks and
moves the counters in the same short transaction, so concurrent calls queue on the
row locks and can never overspend together.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from agents.budgets.periods import is_valid_zone
from claw_platform.crypto import EncryptedTextField
from claw_platform.tenancy.models import TenantOwned

MAX_LIMIT = Decimal("1000000000")  # a billion: anything above is a typo, not a budget
MAX_CALLS_PER_HOUR = 10_000_000
DEFAULT_THRESHOLDS = [80]


def validate_zone(value: str) -> None:
    if not is_valid_zone(value):
        raise ValidationError("Unknown time zone (use an IANA name such as Europe/Paris).")


def default_thresholds() -> list[int]:
    return list(DEFAULT_THRESHOLDS)


class BudgetScope(models.TextChoices):
    TENANT = "tenant", "Whole tenant"
    USER = "user", "One user"
    AGENT = "agent", "One agent"
    API_KEY = "api_key", "One API key"
    ROUTINE = "routine", "One routine"


class BudgetPeriod(models.TextChoices):
    DAY = "day", "Day"
    WEEK = "week", "Week (from Monday)"
    MONTH = "month", "Calendar month"
    NONE = "none", "No period (never resets)"


# The scope's target column; the tenant scope has none.
SCOPE_FIELD = {
    BudgetScope.USER: "user",
    BudgetScope.AGENT: "agent",
    BudgetScope.API_KEY: "api_key",
    BudgetScope.ROUTINE: "routine",
}
# A call rate limit is per tenant and per agent (R5).
RATE_SCOPES = frozenset({BudgetScope.TENANT, BudgetScope.AGENT})


class Budget(TenantOwned):
    # Members see the budgets set on themselves, owners/admins/viewers every one.
    MEMBER_OWNER = "user"

    name = models.CharField(max_length=100, blank=True)
    scope = models.CharField(max_length=10, choices=BudgetScope.choices, default=BudgetScope.TENANT)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    agent = models.ForeignKey(
        "agents.Agent", on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    api_key = models.ForeignKey(
        "api.ApiKey", on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    routine = models.ForeignKey(
        "agents.Routine", on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    limit = models.DecimalField(
        max_digits=16,
        decimal_places=6,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0")), MaxValueValidator(MAX_LIMIT)],
        help_text="Money per period (USD); empty: no money limit (a call-rate limit only).",
    )
    period = models.CharField(max_length=8, choices=BudgetPeriod.choices, default=BudgetPeriod.MONTH)
    hard_limit = models.BooleanField(
        default=True, help_text="Refuse calls that would go over; off: only alert."
    )
    thresholds = models.JSONField(
        default=default_thresholds, blank=True, help_text="Alert at these percentages of the limit."
    )
    calls_per_hour = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_CALLS_PER_HOUR)],
        help_text="LLM calls per hour (tenant and agent budgets); empty: no rate limit.",
    )
    enabled = models.BooleanField(default=True)
    # Live counters, moved only by agents.budgets.guard under the row lock.
    period_start = models.DateTimeField(null=True, blank=True, editable=False)
    spent = models.DecimalField(max_digits=18, decimal_places=8, default=Decimal(0), editable=False)
    reserved = models.DecimalField(max_digits=18, decimal_places=8, default=Decimal(0), editable=False)
    window_start = models.DateTimeField(null=True, blank=True, editable=False)
    window_calls = models.PositiveIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["scope", "id"]
        indexes = [models.Index(fields=["tenant", "enabled"], name="budget_tenant_enabled")]
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(
                        scope="tenant",
                        user__isnull=True,
                        agent__isnull=True,
                        api_key__isnull=True,
                        routine__isnull=True,
                    )
                    | Q(scope="user", user__isnull=False)
                    | Q(scope="agent", agent__isnull=False)
                    | Q(scope="api_key", api_key__isnull=False)
                    | Q(scope="routine", routine__isnull=False)
                ),
                name="budget_scope_has_its_target",
            ),
        ]

    def __str__(self) -> str:
        return self.name or f"{self.get_scope_display()} budget"

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        target = SCOPE_FIELD.get(BudgetScope(self.scope))
        for name in SCOPE_FIELD.values():
            value = getattr(self, f"{name}_id")
            if name == target and value is None:
                errors[name] = [f"A {self.scope} budget needs its {name.replace('_', ' ')}."]
            elif name != target and value is not None:
                errors[name] = [f"Only a {name} budget names a {name.replace('_', ' ')}."]
            elif value is not None and self.tenant_id is not None:
                related = getattr(self, name)
                if getattr(related, "tenant_id", self.tenant_id) != self.tenant_id:
                    errors[name] = ["Not found in this tenant."]
        if self.limit is None and self.calls_per_hour is None:
            errors["limit"] = ["Set a money limit, a call rate (calls per hour), or both."]
        if self.calls_per_hour is not None and self.scope not in RATE_SCOPES:
            errors["calls_per_hour"] = ["A call rate is set on a tenant or an agent budget."]
        thresholds = self.thresholds if isinstance(self.thresholds, list) else None
        if (
            thresholds is None
            or len(thresholds) > 10
            or not all(isinstance(t, int) and not isinstance(t, bool) and 1 <= t <= 100 for t in thresholds)
        ):
            errors["thresholds"] = ["A list of at most 10 whole percentages between 1 and 100."]
        if errors:
            raise ValidationError(errors)

    @property
    def target_id(self) -> int | None:
        field = SCOPE_FIELD.get(BudgetScope(self.scope))
        return getattr(self, f"{field}_id") if field else None


class BudgetReservation(TenantOwned):
    """A call in flight: its worst case held on each budget until it settles.

    A worker that dies mid-call leaves its row; ``expire_reservations`` charges the
    reserved worst case once ``expires_at`` passes (the call may well have been
    billed), so a crash never frees money that was spent."""

    MEMBER_OWNER = "user"

    budget_ids = models.JSONField(default=list)
    amount = models.DecimalField(max_digits=18, decimal_places=8)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    run_id = models.CharField(max_length=64, blank=True)
    model = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"Reservation {self.pk} ({self.amount})"


class BudgetAlert(TenantOwned):
    """A threshold crossed: one row per budget, period and threshold (alerts once)."""

    MEMBER_OWNER = "budget__user"

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="alerts")
    period_start = models.DateTimeField(null=True, blank=True)
    threshold = models.PositiveSmallIntegerField()
    spent = models.DecimalField(max_digits=18, decimal_places=8)
    limit = models.DecimalField(max_digits=16, decimal_places=6)
    webhook_status = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # The owners' banner shows the alert until its period resets or someone dismisses it.
    dismissed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "period_start", "threshold"],
                name="budget_alert_once_per_period",
                nulls_distinct=False,
            )
        ]

    def __str__(self) -> str:
        return f"{self.budget} reached {self.threshold}%"


class KillSwitch(TenantOwned):
    """ "Stop all LLM calls now" for a tenant (``agent`` empty) or one agent."""

    agent = models.ForeignKey(
        "agents.Agent", on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    active = models.BooleanField(default=True)
    reason = models.CharField(max_length=300, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    lifted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["tenant"], name="killswitch_active", condition=Q(active=True))]

    def __str__(self) -> str:
        target = f"agent {self.agent}" if self.agent_id else "the whole tenant"
        return f"Stop LLM calls of {target}" + ("" if self.active else " (lifted)")


class SpendSettings(TenantOwned):
    """A tenant's time zone (budget periods, reports) and where alerts are posted."""

    timezone = models.CharField(max_length=64, default="UTC", validators=[validate_zone])
    alert_webhook_url = models.URLField(max_length=500, blank=True)
    alert_webhook_secret = EncryptedTextField(
        blank=True, help_text="Signs alert posts (X-Claw-Signature); stored encrypted, never shown."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant"], name="spend_settings_one_per_tenant")]
        verbose_name_plural = "spend settings"

    def __str__(self) -> str:
        return f"Spend settings ({self.timezone})"


class UsageDay(TenantOwned):
    """The daily rollup of usage records (O2): one row per tenant, day (in the
    tenant's time zone when the call was recorded), agent, user, model, API key and
    routine, with the calls, tokens and cost summed.

    Kept by a statement trigger on ``agents_usagerecord`` (migration 0002), so every
    way a usage row is written -- the ORM, the step's raw insert -- adds to it in the
    same transaction; the reports read it instead of scanning the raw rows. The ids
    are plain numbers (no foreign keys): an agent or key deleted later leaves its
    history, reported by its number."""

    MEMBER_OWNER = "user_id"

    day = models.DateField()
    agent_id = models.BigIntegerField(null=True)
    user_id = models.BigIntegerField(null=True)
    model = models.CharField(max_length=200)
    api_key_id = models.BigIntegerField(null=True)
    routine_id = models.BigIntegerField(null=True)
    calls = models.BigIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    cost = models.DecimalField(max_digits=20, decimal_places=6, default=Decimal(0))

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "day", "agent_id", "user_id", "model", "api_key_id", "routine_id"],
                name="usage_day_one_row_per_key",
                nulls_distinct=False,
            )
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.model} {self.calls} calls"


class RunawayPause(TenantOwned):
    """A routine paused because it ran away (``agents.budgets.runaway``): it kept
    producing the same output, or its cost per hour jumped past a multiple of its
    usual. Shown to owners in the banner until dismissed or the routine resumes."""

    MEMBER_OWNER = "routine__user"

    routine = models.ForeignKey("agents.Routine", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=16)  # "repeats" or "cost"
    reason = models.CharField(max_length=300)
    created_at = models.DateTimeField(auto_now_add=True)
    dismissed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.routine} paused: {self.reason}"
