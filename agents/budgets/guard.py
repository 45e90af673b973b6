"""Reserve an LLM call's worst case before it is made, settle its real cost after.

``reserve`` runs one short transaction: it locks every enabled budget that applies
to the call (tenant, user, each agent of the run, API key, routine) in id order
(``SELECT … FOR UPDATE``, so two calls never deadlock), rolls each into its current
period and hour, refuses the call if a kill switch is on, a call rate is used up, the
model has no price under a money budget, or the worst case no longer fits a hard
limit, and otherwise adds the worst case to every money budget's ``reserved`` and
writes one :class:`BudgetReservation`. Concurrent calls queue on the row locks, so
N of them can never spend more than the limit together.

``settle`` moves the reservation into ``spent`` at the call's real cost (a stream
cut midway is settled at what it produced) and raises threshold alerts once per
period. A reservation its worker never settled (a crash) is charged at its worst
case by ``expire_reservations`` after ``CLAW_BUDGET_RESERVATION_SECONDS``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, cast

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agents.budgets.errors import BUDGET_EXCEEDED, LLM_STOPPED, RATE_EXCEEDED, UNPRICED_MODEL, BudgetRefused
from agents.budgets.metrics import count_budget_refusal
from agents.budgets.models import Budget, BudgetReservation, KillSwitch, SpendSettings
from agents.budgets.periods import hour_start, period_bounds
from agents.budgets.scope import Charge
from agents.engine.cost import ModelPrice
from claw_platform.prepared import prepared_cursor

_MILLION = Decimal(1_000_000)
_QUANTUM = Decimal("0.00000001")
_ZONE_TTL = 30.0
_zones: dict[int, tuple[float, str]] = {}


@dataclass(frozen=True, slots=True)
class Reservation:
    """What ``reserve`` held for one call (``pk`` None: nothing to settle)."""

    tenant_id: int
    pk: int | None
    budget_ids: tuple[int, ...]
    amount: Decimal


def worst_case_cost(price: ModelPrice, input_tokens: int, max_output_tokens: int) -> Decimal:
    """The most a call can cost: every input token at the dearer of the input and
    cache-write prices, plus every allowed output token."""
    per_input = max(price.input, price.cache_write)
    total = (input_tokens * per_input + max_output_tokens * price.output) / _MILLION
    return total.quantize(_QUANTUM)


def tenant_zone(tenant_id: int) -> str:
    """The tenant's time zone (cached briefly: it changes rarely)."""
    hit = _zones.get(tenant_id)
    now = time.monotonic()
    if hit is not None and now - hit[0] < _ZONE_TTL:
        return hit[1]
    name = (
        SpendSettings._base_manager.filter(tenant_id=tenant_id).values_list("timezone", flat=True).first()
        or "UTC"
    )
    _zones[tenant_id] = (now, name)
    return name


def forget_zone(tenant_id: int) -> None:
    _zones.pop(tenant_id, None)


def _applicable(charge: Charge) -> Q:
    q = Q(scope="tenant")
    if charge.user_id is not None:
        q |= Q(scope="user", user_id=charge.user_id)
    if charge.agent_ids:
        q |= Q(scope="agent", agent_id__in=charge.agent_ids)
    if charge.api_key_id is not None:
        q |= Q(scope="api_key", api_key_id=charge.api_key_id)
    if charge.routine_id is not None:
        q |= Q(scope="routine", routine_id=charge.routine_id)
    return q


def roll(budget: Budget, now: datetime, zone: str) -> datetime | None:
    """Bring the budget's counters into the period and hour of ``now``; its reset time.

    Reservations in flight stay reserved across a period change: they settle (into
    the new period) when their calls end."""
    start, reset_at = period_bounds(budget.period, now, zone)
    if budget.period_start != start:
        budget.period_start = start
        budget.spent = Decimal(0)
    hour = hour_start(now)
    if budget.window_start != hour:
        budget.window_start = hour
        budget.window_calls = 0
    return reset_at


def _when(reset_at: datetime | None, zone: str) -> str:
    if reset_at is None:
        return "it has no period, so it does not reset on its own"
    return "it resets " + reset_at.strftime("%Y-%m-%d %H:%M ") + (zone or "UTC")


def _refuse(charge: Charge, error: BudgetRefused, model: str) -> BudgetRefused:
    from claw_platform.audit.actions import record_audit_event

    record_audit_event(
        action="budget.refused",
        tenant_id=charge.tenant_id,
        object_type="budgets.budget" if error.budget_id else "",
        object_id=str(error.budget_id or ""),
        diff={"code": error.code, "message": error.message, "run": charge.run_id, "model": model},
    )
    count_budget_refusal(error.code, charge.tenant_id)
    return error


def reserve(
    charge: Charge,
    *,
    model: str,
    price: ModelPrice,
    input_tokens: int,
    max_output_tokens: int,
    now: datetime | None = None,
) -> Reservation:
    """Hold the call's worst case on every budget that applies, or raise BudgetRefused."""
    now = now or timezone.now()
    worst = worst_case_cost(price, input_tokens, max_output_tokens)
    try:
        return _reserve(charge, model, price, worst, now)
    except BudgetRefused as refused:
        # The refusal's audit row (nothing was held: the statement changed nothing).
        raise _refuse(charge, refused, model) from None


# The whole reservation in ONE statement (one round trip, its own transaction in
# autocommit): the kill switch, then the applicable budgets locked in id order
# (``FOR UPDATE``: concurrent calls queue here, and a row changed meanwhile is read
# as committed), each rolled into the current period and hour, judged, and -- only if
# every one lets the call through -- updated, with the reservation row written. The
# answer is one row: the kill switch (if on), the refusing budgets (if any), and the
# reservation (if one was made).
_RESERVE_SQL = """
WITH stop AS (
    SELECT agent_id, reason FROM budgets_killswitch
    WHERE tenant_id = %(tenant)s::bigint AND active AND (agent_id IS NULL OR agent_id = ANY(%(agents)s::bigint[]))
    ORDER BY agent_id NULLS FIRST, id LIMIT 1
), locked AS (
    SELECT b.id, b.name, b.scope, b.period, b."limit", b.hard_limit, b.calls_per_hour, b.reserved,
        CASE b.period WHEN 'day' THEN %(day)s::timestamptz WHEN 'week' THEN %(week)s::timestamptz
            WHEN 'month' THEN %(month)s::timestamptz END AS start,
        CASE WHEN b.period_start IS NOT DISTINCT FROM (CASE b.period WHEN 'day' THEN %(day)s::timestamptz
            WHEN 'week' THEN %(week)s::timestamptz WHEN 'month' THEN %(month)s::timestamptz END)
            THEN b.spent ELSE 0 END AS spent_now,
        CASE WHEN b.window_start = %(hour)s::timestamptz THEN b.window_calls ELSE 0 END AS calls_now
    FROM budgets_budget b
    WHERE b.tenant_id = %(tenant)s::bigint AND b.enabled AND (
        b.scope = 'tenant'
        OR (b.scope = 'user' AND b.user_id = %(user)s::bigint)
        OR (b.scope = 'agent' AND b.agent_id = ANY(%(agents)s::bigint[]))
        OR (b.scope = 'api_key' AND b.api_key_id = %(key)s::bigint)
        OR (b.scope = 'routine' AND b.routine_id = %(routine)s::bigint)
    )
    ORDER BY b.id
    FOR UPDATE OF b
), verdict AS (
    SELECT l.*, CASE
        WHEN l.calls_per_hour IS NOT NULL AND l.calls_now + 1 > l.calls_per_hour THEN 'rate'
        WHEN l."limit" IS NOT NULL AND %(unpriced)s::boolean THEN 'unpriced'
        WHEN l."limit" IS NOT NULL AND l.hard_limit AND l.spent_now + l.reserved + %(worst)s::numeric > l."limit" THEN 'over'
        ELSE '' END AS refusal
    FROM locked l
), go AS (
    SELECT NOT EXISTS (SELECT 1 FROM stop) AND NOT EXISTS (SELECT 1 FROM verdict WHERE refusal <> '') AS ok
), held AS (
    UPDATE budgets_budget b SET
        period_start = v.start,
        spent = v.spent_now,
        reserved = v.reserved + CASE WHEN v."limit" IS NULL THEN 0 ELSE %(worst)s::numeric END,
        window_start = %(hour)s::timestamptz,
        window_calls = v.calls_now + 1
    FROM verdict v, go
    WHERE go.ok AND b.id = v.id
    RETURNING b.id, v."limit" IS NOT NULL AS money
), reservation AS (
    INSERT INTO budgets_budgetreservation (tenant_id, budget_ids, amount, user_id, run_id, model, created_at,
        expires_at)
    SELECT %(tenant)s::bigint, jsonb_agg(h.id ORDER BY h.id), %(worst)s::numeric, %(user)s::bigint, %(run)s::text, %(model)s::text, now(), %(expires)s::timestamptz
    FROM held h WHERE h.money
    HAVING count(*) > 0
    RETURNING id, budget_ids
)
SELECT
    (SELECT json_build_array(s.agent_id, s.reason) FROM stop s),
    (SELECT json_agg(json_build_array(v.id, v.refusal, v.name, v.scope, v.period, v."limit", v.spent_now,
        v.reserved, v.calls_per_hour) ORDER BY v.id) FROM verdict v WHERE v.refusal <> ''),
    (SELECT r.id FROM reservation r),
    (SELECT r.budget_ids FROM reservation r),
    CASE WHEN %(async_commit)s::boolean THEN set_config('synchronous_commit', 'off', true) END
"""


def _async_commit() -> bool:
    """Commit the statement without waiting for the WAL flush: only in autocommit
    (inside a caller's transaction the setting would reach the caller's commit)."""
    from django.db import connection

    return bool(settings.CLAW_BUDGET_ASYNC_COMMIT) and connection.get_autocommit()


def _json(value: object) -> object:
    # Raw SQL reads json as text (Django's psycopg set-up).
    return json.loads(value) if isinstance(value, str) else value


def _reserve(charge: Charge, model: str, price: ModelPrice, worst: Decimal, now: datetime) -> Reservation:

    zone = tenant_zone(charge.tenant_id)
    starts = {p: period_bounds(p, now, zone)[0] for p in ("day", "week", "month")}
    params = {
        "tenant": charge.tenant_id,
        "agents": list(charge.agent_ids),
        "user": charge.user_id,
        "key": charge.api_key_id,
        "routine": charge.routine_id,
        "run": charge.run_id[:64],
        "model": model[:200],
        "worst": worst,
        "hour": hour_start(now),
        "unpriced": not getattr(price, "known", True) and not settings.CLAW_BUDGET_ALLOW_UNPRICED,
        "expires": now + timedelta(seconds=settings.CLAW_BUDGET_RESERVATION_SECONDS),
        "async_commit": _async_commit(),
        **starts,
    }
    with prepared_cursor() as cursor:  # parsed and planned once per connection
        cursor.execute(_RESERVE_SQL, params)
        row = cursor.fetchone()
    stop, refusals, reservation_id, budget_ids, _ = row if row else (None, None, None, None, None)
    if stop is not None:
        agent_id, reason = cast(list[Any], _json(stop))
        whose = "this agent" if agent_id else "this team"
        why = f" ({reason})" if reason else ""
        raise BudgetRefused(LLM_STOPPED, f"LLM calls of {whose} are stopped by an owner{why}.")
    if refusals is not None:
        raise _refusal(cast(list[list[Any]], _json(refusals))[0], model, worst, now, zone)
    if reservation_id is None:
        return Reservation(charge.tenant_id, None, (), Decimal(0))
    ids = tuple(int(i) for i in cast(list[Any], _json(budget_ids)))
    return Reservation(charge.tenant_id, reservation_id, ids, worst)


def _refusal(row: list[Any], model: str, worst: Decimal, now: datetime, zone: str) -> BudgetRefused:
    budget_id, kind, name, scope, period, limit, spent, reserved, calls_per_hour = row
    budget = Budget(pk=budget_id, name=name, scope=scope, period=period)
    if kind == "rate":
        reset = hour_start(now) + timedelta(hours=1)
        return BudgetRefused(
            RATE_EXCEEDED,
            f"{_label(budget)} allows {calls_per_hour} LLM calls an hour and they are used up; "
            f"more are allowed from {reset:%H:%M} UTC.",
            budget_id=budget_id,
            reset_at=reset,
        )
    if kind == "unpriced":
        return BudgetRefused(
            UNPRICED_MODEL,
            f"The model {model} has no price, and {_label(budget)} limits spend in money: "
            "set the model profile's prices (0 for a free model) to use it.",
            budget_id=budget_id,
        )
    reset_at = period_bounds(period, now, zone)[1]
    return BudgetRefused(
        BUDGET_EXCEEDED,
        f"{_label(budget)} of ${Decimal(str(limit)):.2f} is used up "
        f"(${Decimal(str(spent)):.2f} spent, ${Decimal(str(reserved)):.2f} held by calls in flight, "
        f"this call could cost up to ${worst:.4f}); {_when(reset_at, zone)}.",
        budget_id=budget_id,
        reset_at=reset_at,
    )


def _label(budget: Budget) -> str:
    name = (
        f"the budget {budget.name!r}" if budget.name else f"the {budget.get_scope_display().lower()} budget"
    )
    period = "" if budget.period == "none" else f" ({budget.get_period_display().lower()})"
    return (name + period)[:1].upper() + (name + period)[1:]


# The settlement in ONE statement: the reservation's row deleted, every budget it
# held moved from reserved to spent, and an alert row for each threshold now reached
# (the unique (budget, period, threshold) constraint makes each alert once per
# period, whoever settles concurrently). A reservation already expired (charged at
# its worst case) matches nothing and changes nothing.
_SETTLE_SQL = """
WITH gone AS (
    DELETE FROM budgets_budgetreservation WHERE id = %(id)s::bigint RETURNING amount
), moved AS (
    UPDATE budgets_budget AS b
    SET reserved = GREATEST(b.reserved - gone.amount, 0), spent = b.spent + %(cost)s::numeric
    FROM gone
    WHERE b.id = ANY(%(ids)s::bigint[])
        AND (NOT %(async_commit)s::boolean OR set_config('synchronous_commit', 'off', true) IS NOT NULL)
    RETURNING b.id, b.tenant_id, b.spent, b."limit", b.thresholds, b.period_start
)
INSERT INTO budgets_budgetalert
    (tenant_id, budget_id, period_start, threshold, spent, "limit", webhook_status, created_at)
SELECT m.tenant_id, m.id, m.period_start, t.value::int, m.spent, m."limit", '', now()
FROM moved m
CROSS JOIN LATERAL jsonb_array_elements(
    CASE WHEN jsonb_typeof(m.thresholds) = 'array' THEN m.thresholds ELSE '[]'::jsonb END
) AS t(value)
WHERE m."limit" > 0 AND jsonb_typeof(t.value) = 'number' AND m.spent * 100 / m."limit" >= t.value::numeric
ORDER BY m.id, t.value::numeric
ON CONFLICT DO NOTHING
RETURNING id
"""

_ALERT_SQL = """
INSERT INTO budgets_budgetalert
    (tenant_id, budget_id, period_start, threshold, spent, "limit", webhook_status, created_at)
VALUES (%(tenant)s, %(budget)s, %(start)s, %(threshold)s, %(spent)s, %(limit)s, '', now())
ON CONFLICT DO NOTHING
RETURNING id
"""


def settle(reservation: Reservation, cost: Decimal, *, now: datetime | None = None) -> list[int]:
    """Replace the reservation by the call's real ``cost``; the ids of new alerts
    (delivered once the statement commits)."""
    if reservation.pk is None:
        return []

    params: dict[str, Any] = {
        "id": reservation.pk,
        "cost": cost,
        "ids": list(reservation.budget_ids),
        "async_commit": _async_commit(),
    }
    with prepared_cursor() as cursor:  # parsed and planned once per connection
        cursor.execute(_SETTLE_SQL, params)
        alerts = [row[0] for row in cursor.fetchall()]
    if alerts:
        from agents.budgets.alerts import deliver_alerts

        transaction.on_commit(lambda: deliver_alerts(alerts))
    return alerts


def _reached(spent: Decimal, limit: Decimal | None, thresholds: object) -> list[int]:
    if isinstance(thresholds, str):  # raw SQL reads jsonb as text (Django's psycopg setup)
        try:
            thresholds = json.loads(thresholds)
        except ValueError:
            return []
    if not limit or not isinstance(thresholds, list):
        return []
    percent = spent * 100 / limit
    return sorted({int(t) for t in thresholds if isinstance(t, int | float) and percent >= t})


def _insert_alerts(
    tenant_id: int,
    budget_id: int,
    spent: Decimal,
    limit: Decimal | None,
    thresholds: object,
    start: datetime | None,
) -> list[int]:
    """Alert rows for the thresholds reached; the unique (budget, period, threshold)
    constraint makes each alert once per period, whoever settles concurrently."""
    from django.db import connection

    created = []
    for threshold in _reached(spent, limit, thresholds):
        with connection.cursor() as cursor:
            cursor.execute(
                _ALERT_SQL,
                {
                    "tenant": tenant_id,
                    "budget": budget_id,
                    "start": start,
                    "threshold": threshold,
                    "spent": spent,
                    "limit": limit,
                },
            )
            row = cursor.fetchone()
        if row is not None:
            created.append(row[0])
    return created


def _charge(
    tenant_id: int,
    budget_ids: tuple[int, ...] | list[int],
    held: Decimal,
    cost: Decimal,
    now: datetime | None,
) -> list[int]:
    now = now or timezone.now()
    zone = tenant_zone(tenant_id)
    budgets = list(Budget._base_manager.select_for_update().filter(pk__in=budget_ids).order_by("id"))
    alerts: list[int] = []
    for budget in budgets:
        roll(budget, now, zone)
        budget.reserved = max(Decimal(0), budget.reserved - held)
        budget.spent += cost
        alerts.extend(_cross_thresholds(budget))
    Budget._base_manager.bulk_update(
        budgets, ["period_start", "spent", "reserved", "window_start", "window_calls"]
    )
    if alerts:
        from agents.budgets.alerts import deliver_alerts

        transaction.on_commit(lambda: deliver_alerts(alerts))
    return alerts


def _cross_thresholds(budget: Budget) -> list[int]:
    return _insert_alerts(
        budget.tenant_id, budget.pk, budget.spent, budget.limit, budget.thresholds, budget.period_start
    )


def expire_reservations(now: datetime | None = None) -> int:
    """Charge reservations whose worker never settled them at their worst case."""
    now = now or timezone.now()
    count = 0
    while True:
        with transaction.atomic():
            row = (
                BudgetReservation._base_manager.select_for_update(skip_locked=True)
                .filter(expires_at__lt=now)
                .order_by("expires_at")
                .first()
            )
            if row is None:
                return count
            row.delete()
            _charge(row.tenant_id, list(row.budget_ids), row.amount, row.amount, now)
            count += 1


@dataclass(frozen=True, slots=True)
class BudgetState:
    spent: Decimal
    reserved: Decimal
    remaining: Decimal | None
    period_start: datetime | None
    resets_at: datetime | None
    calls_this_hour: int


def budget_state(budget: Budget, now: datetime | None = None) -> BudgetState:
    """The budget's spend as of ``now`` (an elapsed period reads as zero)."""
    now = now or timezone.now()
    start, reset_at = period_bounds(budget.period, now, tenant_zone(budget.tenant_id))
    spent = budget.spent if budget.period_start == start else Decimal(0)
    calls = budget.window_calls if budget.window_start == hour_start(now) else 0
    remaining = None if budget.limit is None else max(Decimal(0), budget.limit - spent - budget.reserved)
    return BudgetState(spent, budget.reserved, remaining, start, reset_at, calls)


def check_budget_open(charge: Charge, *, now: datetime | None = None) -> None:
    """Raise BudgetRefused when a call of ``charge`` would surely be refused now: a
    kill switch is on, a hard money budget is used up, or a call rate is spent.

    The API asks this before it queues a message (402 up front, no run); it locks
    nothing -- the reservation before the LLM call stays the real check."""
    now = now or timezone.now()
    stop = (
        KillSwitch._base_manager.filter(tenant_id=charge.tenant_id, active=True)
        .filter(Q(agent__isnull=True) | Q(agent_id__in=charge.agent_ids))
        .values_list("agent_id", "reason")
        .first()
    )
    if stop is not None:
        whose = "this agent" if stop[0] else "this team"
        raise _refuse(
            charge, BudgetRefused(LLM_STOPPED, f"LLM calls of {whose} are stopped by an owner."), ""
        )
    budgets = Budget._base_manager.filter(tenant_id=charge.tenant_id, enabled=True).filter(
        _applicable(charge)
    )
    for budget in budgets.order_by("id"):
        state = budget_state(budget, now)
        if budget.limit is not None and budget.hard_limit and state.spent + state.reserved >= budget.limit:
            zone = tenant_zone(charge.tenant_id)
            error = BudgetRefused(
                BUDGET_EXCEEDED,
                f"{_label(budget)} of ${budget.limit:.2f} is used up; {_when(state.resets_at, zone)}.",
                budget_id=budget.pk,
                reset_at=state.resets_at,
            )
            raise _refuse(charge, error, "")
        if budget.calls_per_hour is not None and state.calls_this_hour >= budget.calls_per_hour:
            reset = hour_start(now) + timedelta(hours=1)
            error = BudgetRefused(
                RATE_EXCEEDED,
                f"{_label(budget)} allows {budget.calls_per_hour} LLM calls an hour and they are used up.",
                budget_id=budget.pk,
                reset_at=reset,
            )
            raise _refuse(charge, error, "")
