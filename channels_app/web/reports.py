"""The usage report page (O2) at ``/reports/usage/``: a page of the product in the
chat's style for everyone of the team -- owners, admins and viewers see the team's
usage, members their own (the member rule).

A period picker, totals, a chart of cost per day stacked by agent or by model
(Chart.js, installed at set-up with the chat's libraries; the page works offline),
and tables by agent, user, model, API key, routine and day, each with its CSV
export: a link to ``/api/v1/usage/?format=csv`` with the same period and grouping,
so the file is the API's by construction. Everything comes from the daily rollup
(``agents.budgets.usage_report``).
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from agents.budgets.usage_report import UsageQuery, totals, usage_rows
from channels_app.web.security import chat_headers
from claw_platform.api.views.reports import MAX_PERIOD_DAYS, tenant_today
from claw_platform.tenancy.lookup import member_role
from claw_platform.tenancy.member_rule import Caller

TABLES = (
    ("agent", "By agent"),
    ("user", "By user"),
    ("model", "By model"),
    ("key", "By API key"),
    ("routine", "By routine"),
    ("day", "By day"),
)
STACKS = ("agent", "model")


def _day(value: str | None, default: date) -> tuple[date, str]:
    if not value:
        return default, ""
    try:
        return date.fromisoformat(value), ""
    except ValueError:
        return default, f"{value!r} is not a day (use YYYY-MM-DD)."


@require_GET
@login_required
@chat_headers
def usage_report(request: HttpRequest) -> HttpResponse:
    tenant = request.tenant  # type: ignore[attr-defined]
    if tenant is None:
        return render(request, "chat/no_team.html", status=403)
    caller = Caller(tenant.pk, request.user.pk, member_role(tenant.pk, request.user.pk))
    today = tenant_today(tenant.pk)
    until, error_until = _day(request.GET.get("until"), today)
    since, error_since = _day(request.GET.get("since"), until - timedelta(days=29))
    errors = [e for e in (error_since, error_until) if e]
    if since > until:
        errors.append("The first day is after the last one; showing the 30 days before the last.")
        since = until - timedelta(days=29)
    if (until - since).days > MAX_PERIOD_DAYS:
        errors.append(f"A report covers at most {MAX_PERIOD_DAYS} days; showing the last {MAX_PERIOD_DAYS}.")
        since = until - timedelta(days=MAX_PERIOD_DAYS)
    asked = request.GET.get("stack", "")
    stack = asked if asked in STACKS else "agent"
    tables: list[dict[str, Any]] = []
    for group, title in TABLES:
        rows = usage_rows(caller, UsageQuery(since, until, (group,)))
        csv_url = "/api/v1/usage/?" + urlencode(
            {"group_by": group, "since": since.isoformat(), "until": until.isoformat(), "format": "csv"}
        )
        tables.append({"group": group, "title": title, "rows": rows, "csv_url": csv_url})
    by_day = usage_rows(caller, UsageQuery(since, until, ("day", stack)))
    return render(
        request,
        "reports/usage.html",
        {
            "tenant": tenant,
            "since": since,
            "until": until,
            "stack": stack,
            "stacks": STACKS,
            "errors": errors,
            "own_only": not caller.sees_every_session,
            "totals": totals(tables[0]["rows"]),
            "tables": tables,
            "chart": _chart(by_day, stack, since, until),
        },
    )


def _chart(rows: list[dict[str, Any]], stack: str, since: date, until: date) -> dict[str, Any]:
    """Chart.js data: one bar per day of the period, one stacked series per agent or model."""
    days = [(since + timedelta(days=n)).isoformat() for n in range((until - since).days + 1)]
    index = {d: n for n, d in enumerate(days)}
    series: dict[str, list[float]] = {}
    for row in rows:
        name = str(row[stack] if row[stack] is not None else "(none)")
        values = series.setdefault(name, [0.0] * len(days))
        values[index[row["day"].isoformat()]] += float(row["cost"])
    return {"labels": days, "datasets": [{"label": k, "data": v} for k, v in sorted(series.items())]}
