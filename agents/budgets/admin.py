"""Admin pages: budgets (with spend so far and reset time), alerts, kill switches,
the tenant's spend settings and the routines paused as runaways (read-only). Members
see the budgets set on themselves, and the pauses of their own routines, only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from agents.budgets.guard import budget_state, forget_zone
from agents.budgets.killswitch import cancel_running_runs
from agents.budgets.models import Budget, BudgetAlert, KillSwitch, RunawayPause, SpendSettings
from claw_platform.admin.scoped import MemberRuleMixin, TenantScopedAdmin, can_edit


@admin.register(Budget)
class BudgetAdmin(MemberRuleMixin, TenantScopedAdmin):
    list_display = [
        "__str__",
        "scope",
        "target",
        "limit",
        "period",
        "hard_limit",
        "spent_so_far",
        "resets_at",
        "calls_per_hour",
        "enabled",
    ]
    list_filter = ["scope", "period", "enabled", "hard_limit"]
    list_select_related = ["agent", "user", "api_key", "routine"]
    readonly_fields = ["spent_so_far", "reserved", "resets_at", "calls_this_hour"]
    fields = [
        "name",
        "scope",
        "user",
        "agent",
        "api_key",
        "routine",
        "limit",
        "period",
        "hard_limit",
        "thresholds",
        "calls_per_hour",
        "enabled",
        "spent_so_far",
        "reserved",
        "resets_at",
        "calls_this_hour",
    ]

    @admin.display(description="Applies to")
    def target(self, obj: Budget) -> str:
        related = {"user": obj.user, "agent": obj.agent, "api_key": obj.api_key, "routine": obj.routine}
        value = related.get(obj.scope)
        return str(value) if value is not None else "whole tenant"

    @admin.display(description="Spent this period")
    def spent_so_far(self, obj: Budget) -> str:
        return f"${budget_state(obj).spent:.4f}" if obj.pk else "-"

    @admin.display(description="Reset")
    def resets_at(self, obj: Budget) -> str:
        if not obj.pk:
            return "-"
        reset = budget_state(obj).resets_at
        return timezone.localtime(reset).strftime("%Y-%m-%d %H:%M %Z") if reset else "never"

    @admin.display(description="Calls this hour")
    def calls_this_hour(self, obj: Budget) -> int:
        return budget_state(obj).calls_this_hour if obj.pk else 0


@admin.register(BudgetAlert)
class BudgetAlertAdmin(MemberRuleMixin, TenantScopedAdmin):
    list_display = ["created_at", "budget", "threshold", "spent", "limit", "webhook_status"]
    list_select_related = ["budget"]
    readonly_fields = [
        "budget",
        "period_start",
        "threshold",
        "spent",
        "limit",
        "webhook_status",
        "created_at",
    ]

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(KillSwitch)
class KillSwitchAdmin(TenantScopedAdmin):
    """Adding a row stops every LLM call of the tenant (or agent) at once; the
    "Lift" action lets them run again. Both are audited."""

    list_display = ["__str__", "agent", "active", "reason", "created_by", "created_at", "lifted_at"]
    list_filter = ["active"]
    fields = ["agent", "reason", "active", "created_by", "created_at", "lifted_at"]
    readonly_fields = ["active", "created_by", "created_at", "lifted_at"]
    actions = ["lift"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: KillSwitch, form: Any, change: bool) -> None:
        if not change:
            obj.created_by = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)
        if not change:
            tenant_id, agent_id, user = obj.tenant_id, obj.agent_id, request.user
            transaction.on_commit(lambda: cancel_running_runs(tenant_id, agent_id, user))

    @admin.action(description="Lift: allow LLM calls again")
    def lift(self, request: HttpRequest, queryset: QuerySet) -> None:
        if not can_edit(request):
            return
        from agents.budgets.actions import do_lift_kill_switch

        for switch in queryset.filter(active=True):
            do_lift_kill_switch(switch, acting_user=request.user)
        messages.success(request, "LLM calls are allowed again.")


@admin.register(SpendSettings)
class SpendSettingsAdmin(TenantScopedAdmin):
    list_display = ["__str__", "timezone", "alert_webhook_url", "updated_at"]
    fields = ["timezone", "alert_webhook_url", "alert_webhook_secret"]

    def save_model(self, request: HttpRequest, obj: SpendSettings, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        tenant_id = obj.tenant_id
        transaction.on_commit(lambda: forget_zone(tenant_id))


@admin.register(RunawayPause)
class RunawayPauseAdmin(MemberRuleMixin, TenantScopedAdmin):
    """Routines paused because they ran away (agents.budgets.runaway): read-only; the
    routine's own page resumes it, the owners' banner dismisses the report."""

    list_display = ["created_at", "routine", "kind", "reason", "dismissed_at"]
    list_filter = ["kind"]
    list_select_related = ["routine"]
    readonly_fields = ["routine", "kind", "reason", "created_at", "dismissed_at"]
    fields = ["routine", "kind", "reason", "created_at", "dismissed_at"]

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
