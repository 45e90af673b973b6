"""What a crossed threshold does: an audit row, a banner for owners (chat and admin,
``current_alerts``) and a signed POST to the tenant's alert webhook if one is set.

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
from datetime import timedelta
from typing import Any

from django.utils import timezone

from agents.budgets.metrics import count_budget_alert
from agents.budgets.models import BudgetAlert, SpendSettings
from claw_platform.audit.actions import record_audit_event

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

    try:
        for alert_id, body in posts:
            with tenant_context(tenant_id):  # a thread of its own: the alert's tenant, set again
                status = asyncio.run(post_alert(tenant_id, url, secret, body))
                BudgetAlert._base_manager.filter(pk=alert_id).update(webhook_status=status[:100])
    except Exception:  # a thread of its own: log, never crash the process
        logger.exception("budget alert webhook failed")
    finally:
        connection.close()


async def post_alert(tenant_id: int, url: str, secret: str, body: bytes) -> str:
    """POST one alert; the outcome as a short status ("HTTP 200", "refused: …")."""
    from tools_app.guards.ssrf import BlockedDestination
    from tools_app.hooks.kinds import sign_webhook
    from tools_app.net.fetch import guarded_request
    from tools_app.net.transports import guarded_client
    from tools_app.runtime.network import guard_for_tenant

    guard = guard_for_tenant(tenant_id)
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
    """Alerts of the tenant's current periods for the owners' banner (newest first)."""
    since = timezone.now() - timedelta(days=days)
    rows = BudgetAlert._base_manager.select_related("budget").filter(
        tenant_id=tenant_id, created_at__gte=since
    )
    return [a for a in rows.order_by("-created_at")[:20] if a.period_start == a.budget.period_start]
