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
        # One round trip answers the common case (nothing limits this call) without
        # opening a transaction; otherwise the locking transaction decides.
        if not _anything_applies(charge):
            return Reservation(charge.tenant_id, None, (), Decimal(0))
        with transaction.atomic():
            return _reserve(charge, model, price, worst, now)
    except BudgetRefused as refused:
        # The refusal's audit row outlives the rolled-back reservation attempt.
        raise _refuse(charge, refused, model) from None


_ANYTHING_SQL = """
SELECT EXISTS (
    SELECT 1 FROM budgets_killswitch
    WHERE tenant_id = %(tenant)s AND active AND (agent_id IS NULL OR agent_id = ANY(%(agents)s))
) OR EXISTS (
    SELECT 1 FROM budgets_budget
    WHERE tenant_id = %(tenant)s AND enabled AND (
        scope = 'tenant'
        OR (scope = 'user' AND user_id = %(user)s)
        OR (scope = 'agent' AND agent_id = ANY(%(agents)s))
        OR (scope = 'api_key' AND api_key_id = %(key)s)
        OR (scope = 'routine' AND routine_id = %(routine)s)
    )
)
"""


def _anything_applies(charge: Charge) -> bool:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            _ANYTHING_SQL,
            {
                "tenant": charge.tenant_id,
                "agents": list(charge.agent_ids),
                "user": charge.user_id,
                "key": charge.api_key_id,
                "routine": charge.routine_id,
            },
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def _reserve(charge: Charge, model: str, price: ModelPrice, worst: Decimal, now: datetime) -> Reservation:
    stop = (
        KillSwitch._base_manager.filter(tenant_id=charge.tenant_id, active=True)
        .filter(Q(agent__isnull=True) | Q(agent_id__in=charge.agent_ids))
        .values_list("agent_id", "reason")
        .first()
    )
    if stop is not None:
        whose = "this agent" if stop[0] else "this team"
        reason = f" ({stop[1]})" if stop[1] else ""
        raise BudgetRefused(LLM_STOPPED, f"LLM calls of {whose} are stopped by an owner{reason}.")
    budgets = list(
        Budget._base_manager.select_for_update()
        .filter(tenant_id=charge.tenant_id, enabled=True)
        .filter(_applicable(charge))
        .order_by("id")
    )
    if not budgets:
        return Reservation(charge.tenant_id, None, (), Decimal(0))
    zone = tenant_zone(charge.tenant_id)
    money: list[Budget] = []
    for budget in budgets:
        reset_at = roll(budget, now, zone)
        if budget.calls_per_hour is not None and budget.window_calls + 1 > budget.calls_per_hour:
            raise BudgetRefused(
                RATE_EXCEEDED,
                f"{_label(budget)} allows {budget.calls_per_hour} LLM calls an hour and they are used up; "
                f"more are allowed from {(budget.window_start or now) + timedelta(hours=1):%H:%M} UTC.",
                budget_id=budget.pk,
                reset_at=(budget.window_start or now) + timedelta(hours=1),
            )
        if budget.limit is None:
            continue
        if not getattr(price, "known", True) and not settings.CLAW_BUDGET_ALLOW_UNPRICED:
            raise BudgetRefused(
                UNPRICED_MODEL,
                f"The model {model} has no price, and {_label(budget)} limits spend in money: "
                "set the model profile's prices (0 for a free model) to use it.",
                budget_id=budget.pk,
            )
        if budget.hard_limit and budget.spent + budget.reserved + worst > budget.limit:
            raise BudgetRefused(
                BUDGET_EXCEEDED,
                f"{_label(budget)} of ${budget.limit:.2f} is used up "
                f"(${budget.spent:.2f} spent, ${budget.reserved:.2f} held by calls in flight, "
                f"this call could cost up to ${worst:.4f}); {_when(reset_at, zone)}.",
                budget_id=budget.pk,
                reset_at=reset_at,
            )
        money.append(budget)
    for budget in budgets:
        budget.window_calls += 1
    for budget in money:
        budget.reserved += worst
    Budget._base_manager.bulk_update(
        budgets, ["period_start", "spent", "reserved", "window_start", "window_calls"]
    )
    if not money:
        return Reservation(charge.tenant_id, None, (), Decimal(0))
    ids = tuple(b.pk for b in money)
    row = BudgetReservation._base_manager.create(
        tenant_id=charge.tenant_id,
        budget_ids=list(ids),
        amount=worst,
        user_id=charge.user_id,
        run_id=charge.run_id,
        model=model[:200],
        expires_at=now + timedelta(seconds=settings.CLAW_BUDGET_RESERVATION_SECONDS),
    )
    return Reservation(charge.tenant_id, row.pk, ids, worst)


def _label(budget: Budget) -> str:
    name = (
        f"the budget {budget.name!r}" if budget.name else f"the {budget.get_scope_display().lower()} budget"
    )
    period = "" if budget.period == "none" else f" ({budget.get_period_display().lower()})"
    return (name + period)[:1].upper() + (name + period)[1:]


_SETTLE_SQL = """
WITH gone AS (
    DELETE FROM budgets_budgetreservation WHERE id = %(id)s RETURNING amount
)
UPDATE budgets_budget AS b
SET reserved = GREATEST(b.reserved - gone.amount, 0), spent = b.spent + %(cost)s
FROM gone
WHERE b.id = ANY(%(ids)s)
RETURNING b.id, b.spent, b."limit", b.thresholds, b.period_start
"""

_ALERT_SQL = """
INSERT INTO budgets_budgetalert
    (tenant_id, budget_id, period_start, threshold, spent, "limit", webhook_status, created_at)
VALUES (%(tenant)s, %(budget)s, %(start)s, %(threshold)s, %(spent)s, %(limit)s, '', now())
ON CONFLICT DO NOTHING
RETURNING id
"""


def settle(reservation: Reservation, cost: Decimal, *, now: datetime | None = None) -> list[int]:
    """Replace the reservation by the call's real ``cost``; the ids of new alerts.

    One statement: the reservation's row is deleted and every budget it held moved
    from reserved to spent (row locks taken by the UPDATE); a reservation already
    expired (charged at its worst case) changes nothing."""
    if reservation.pk is None:
        return []
    from django.db import connection

    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                _SETTLE_SQL, {"id": reservation.pk, "cost": cost, "ids": list(reservation.budget_ids)}
            )
            rows = cursor.fetchall()
        alerts: list[int] = []
        for budget_id, spent, limit, thresholds, period_start in rows:
            alerts.extend(
                _insert_alerts(reservation.tenant_id, budget_id, spent, limit, thresholds, period_start)
            )
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
