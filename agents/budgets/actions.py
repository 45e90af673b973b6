"""State changes of budgets, kill switches and spend settings, each audited.

Counters (spent, reserved, calls) are moved only by ``agents.budgets.guard``."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.budgets.guard import forget_zone
from agents.budgets.models import Budget, KillSwitch, SpendSettings
from claw_platform.audit.actions import diff_snapshots, record_audit_event, snapshot

CONFIG_FIELDS = (
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
)


@transaction.atomic
def do_create_budget(
    tenant_id: int, data: dict[str, Any], *, acting_user: Any, ip: str | None = None
) -> Budget:
    budget = Budget(tenant_id=tenant_id, **{k: v for k, v in data.items() if k in CONFIG_FIELDS})
    budget.full_clean()
    budget.save()
    record_audit_event(
        action="budget.create",
        actor=acting_user,
        obj=budget,
        diff=diff_snapshots(None, snapshot(budget)),
        ip=ip,
    )
    return budget


@transaction.atomic
def do_update_budget(
    budget: Budget, data: dict[str, Any], *, acting_user: Any, ip: str | None = None
) -> Budget:
    budget = Budget._base_manager.select_for_update().get(pk=budget.pk)
    before = snapshot(budget)
    for key, value in data.items():
        if key in CONFIG_FIELDS:
            setattr(budget, key, value)
    budget.full_clean()
    budget.save()
    record_audit_event(
        action="budget.update",
        actor=acting_user,
        obj=budget,
        diff=diff_snapshots(before, snapshot(budget)),
        ip=ip,
    )
    return budget


@transaction.atomic
def do_delete_budget(budget: Budget, *, acting_user: Any, ip: str | None = None) -> None:
    record_audit_event(
        action="budget.delete",
        actor=acting_user,
        obj=budget,
        diff=diff_snapshots(snapshot(budget), None),
        ip=ip,
    )
    budget.delete()


def do_stop_llm_calls(
    tenant_id: int, *, agent_id: int | None = None, reason: str = "", acting_user: Any, ip: str | None = None
) -> KillSwitch:
    """The kill switch: refuse every new LLM call of the tenant (or agent) and stop
    its running runs now (they end as cancelled within a second)."""
    from agents.budgets.killswitch import cancel_running_runs

    with transaction.atomic():
        switch = KillSwitch._base_manager.create(
            tenant_id=tenant_id,
            agent_id=agent_id,
            reason=reason[:300],
            created_by=acting_user if getattr(acting_user, "pk", None) else None,
        )
        record_audit_event(
            action="budget.kill_switch.on",
            actor=acting_user,
            obj=switch,
            diff={"agent": agent_id, "reason": reason[:300]},
            ip=ip,
        )
        transaction.on_commit(lambda: cancel_running_runs(tenant_id, agent_id, acting_user))
    return switch


@transaction.atomic
def do_lift_kill_switch(switch: KillSwitch, *, acting_user: Any, ip: str | None = None) -> KillSwitch:
    KillSwitch._base_manager.filter(pk=switch.pk, active=True).update(active=False, lifted_at=timezone.now())
    switch.refresh_from_db()
    record_audit_event(action="budget.kill_switch.off", actor=acting_user, obj=switch, ip=ip)
    return switch


@transaction.atomic
def do_save_spend_settings(
    tenant_id: int, data: dict[str, Any], *, acting_user: Any, ip: str | None = None
) -> SpendSettings:
    row, _ = SpendSettings._base_manager.select_for_update().get_or_create(tenant_id=tenant_id)
    before = snapshot(row)
    for key in ("timezone", "alert_webhook_url", "alert_webhook_secret"):
        if key in data:
            setattr(row, key, data[key])
    row.full_clean()
    row.save()
    record_audit_event(
        action="budget.settings",
        actor=acting_user,
        obj=row,
        diff=diff_snapshots(before, snapshot(row)),
        ip=ip,
    )
    transaction.on_commit(lambda: forget_zone(tenant_id))
    return row
