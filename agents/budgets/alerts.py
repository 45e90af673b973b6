"""What a crossed threshold does: an audit row, a banner for owners (chat and admin,
``owner_banners``) and a signed POST to the tenant's alert webhook if one is set.

The guard creates the ``BudgetAlert`` rows under the budget's row lock (one per
budget, period and threshold); this runs after that transaction commits. The POST
goes out on a thread of its own so a slow receiver never holds an LLM call up; it
goes through the SSRF guard with the tenant's allow-list, like webhook hooks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from agents.budgets.metrics import count_budget_alert
from agents.budgets.models import BudgetAlert, SpendSettings
from claw_platform.audit.actions import record_audit_event

if TYPE_CHECKING:
    from tools_app.guards.ssrf import SsrfGuard

logger = logging.getLogger("claw.budgets.alerts")

WEBHOOK_TIMEOUT_SECONDS = 10.0
BANNER_DAYS = 7


def alert_document(alert: BudgetAlert) -> dict[str, Any]:
    budget = alert.budget
    return {
        "event": "budget.threshold",
        "tenant_id": alert.tenant_id,
        "budget": {"id": budget.pk, "name": str(budget), "scope": budget.scope, "period": budget.period},
        "threshold": alert.threshold,
        "spent": str(alert.spent),
        "limit": str(alert.limit),
        "period_start": alert.period_start.isoformat() if alert.period_start else None,
        "at": alert.created_at.isoformat(),
    }


def alert_text(alert: BudgetAlert) -> str:
    return (
        f"{alert.budget} reached {alert.threshold}% of its limit (${alert.spent:.2f} of ${alert.limit:.2f})."
    )


def deliver_alerts(alert_ids: list[int]) -> None:
    alerts = list(BudgetAlert._base_manager.select_related("budget").filter(pk__in=alert_ids))
    for alert in alerts:
        record_audit_event(
            action="budget.alert",
            tenant_id=alert.tenant_id,
            obj=alert.budget,
            diff={"threshold": alert.threshold, "spent": str(alert.spent), "limit": str(alert.limit)},
        )
        count_budget_alert(alert.tenant_id, alert.threshold)
    by_tenant: dict[int, list[BudgetAlert]] = {}
    for alert in alerts:
        by_tenant.setdefault(alert.tenant_id, []).append(alert)
    for tenant_id, items in by_tenant.items():
        settings_row = SpendSettings._base_manager.filter(tenant_id=tenant_id).first()
        if settings_row is None or not settings_row.alert_webhook_url:
            continue
        posts = [(a.pk, json.dumps(alert_document(a)).encode()) for a in items]
        thread = threading.Thread(
            target=_post_all,
            args=(tenant_id, settings_row.alert_webhook_url, settings_row.alert_webhook_secret or "", posts),
            name="budget-alert-webhook",
            daemon=True,
        )
        thread.start()


def _post_all(tenant_id: int, url: str, secret: str, posts: list[tuple[int, bytes]]) -> None:
    from django.db import connection

    from claw_platform.tenancy.context import tenant_context
    from tools_app.runtime.network import guard_for_tenant

    try:
        with tenant_context(tenant_id):  # a thread of its own: the alert's tenant, set again
            # The allow-list is read here, synchronously: the event loop below runs
            # no database query (Django refuses those inside a running loop).
            guard = guard_for_tenant(tenant_id)
            for alert_id, body in posts:
                status = asyncio.run(post_alert(guard, url, secret, body))
                BudgetAlert._base_manager.filter(pk=alert_id).update(webhook_status=status[:100])
    except Exception:  # a thread of its own: log, never crash the process
        logger.exception("budget alert webhook failed")
    finally:
        connection.close()


async def post_alert(guard: SsrfGuard, url: str, secret: str, body: bytes) -> str:
    """POST one alert through ``guard`` (the tenant's SSRF guard); the outcome as a
    short status ("HTTP 200", "refused: …"). Makes no database query."""
    from tools_app.guards.ssrf import BlockedDestination
    from tools_app.hooks.kinds import sign_webhook
    from tools_app.net.fetch import guarded_request
    from tools_app.net.transports import guarded_client

    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "ClawPlatform-Budget/1",
        "X-Claw-Event": "budget.threshold",
        "X-Claw-Timestamp": timestamp,
    }
    if secret:
        headers["X-Claw-Signature"] = sign_webhook(secret, timestamp, body)
    try:
        async with guarded_client(guard, timeout=WEBHOOK_TIMEOUT_SECONDS) as client:
            response = await guarded_request(
                client, guard, "POST", url, headers=headers, content=body, max_bytes=4096, max_redirects=0
            )
    except BlockedDestination as exc:
        return f"refused: {exc.message}"
    except Exception as exc:  # network errors of every kind end as a status
        return f"failed: {type(exc).__name__}"
    return f"HTTP {response.status}"


def current_alerts(tenant_id: int, *, days: int = BANNER_DAYS) -> list[BudgetAlert]:
    """Alerts for the owners' banner (newest first): not dismissed, of the budget's
    current period (an alert of a period that has reset is over), at most ``days`` old."""
    from agents.budgets.guard import tenant_zone
    from agents.budgets.periods import period_bounds

    now = timezone.now()
    rows = BudgetAlert._base_manager.select_related("budget").filter(
        tenant_id=tenant_id, created_at__gte=now - timedelta(days=days), dismissed_at__isnull=True
    )
    zone = tenant_zone(tenant_id)
    return [
        a
        for a in rows.order_by("-created_at")[:20]
        if a.period_start == period_bounds(a.budget.period, now, zone)[0]
    ]


@dataclass(frozen=True)
class Banner:
    """One line of the owners' banner, with what its Dismiss button posts."""

    kind: str  # "alert" or "runaway"
    pk: int
    text: str


def owner_banners(tenant_id: int) -> list[Banner]:
    """What the owners' banner shows in the chat and the admin: budget thresholds
    crossed this period, and routines paused for running away (while still paused)."""
    from agents.budgets.models import RunawayPause
    from agents.models import RoutineStatus

    banners = [Banner("alert", a.pk, alert_text(a)) for a in current_alerts(tenant_id)]
    pauses = (
        RunawayPause._base_manager.select_related("routine")
        .filter(tenant_id=tenant_id, dismissed_at__isnull=True, routine__status=RoutineStatus.PAUSED)
        .order_by("-created_at")[:10]
    )
    banners += [
        Banner("runaway", p.pk, f"The routine {p.routine.name!r} was paused: {p.reason}.") for p in pauses
    ]
    return banners


def dismiss_banner(tenant_id: int, kind: str, pk: int, *, acting_user: Any) -> bool:
    """Hide one banner line for the whole team (audited); False when not found."""
    from agents.budgets.models import RunawayPause

    row: BudgetAlert | RunawayPause | None
    if kind == "alert":
        row = BudgetAlert._base_manager.filter(tenant_id=tenant_id, pk=pk, dismissed_at__isnull=True).first()
    elif kind == "runaway":
        row = RunawayPause._base_manager.filter(tenant_id=tenant_id, pk=pk, dismissed_at__isnull=True).first()
    else:
        return False
    if row is None:
        return False
    row.dismissed_at = timezone.now()
    row.save(update_fields=["dismissed_at"])
    record_audit_event(action="budget.banner_dismissed", actor=acting_user, obj=row, diff={"kind": kind})
    return True
