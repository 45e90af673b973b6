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
from agents.budgets.models import Budget, BudgetAlert, BudgetReservation, KillSwitch, SpendSettings
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
        with transaction.atomic():
            return _reserve(charge, model, price, worst, now)
    except BudgetRefused as refused:
        # The refusal's audit row outlives the rolled-back reservation attempt.
        raise _refuse(charge, refused, model) from None


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


def settle(reservation: Reservation, cost: Decimal, *, now: datetime | None = None) -> list[int]:
    """Replace the reservation by the call's real ``cost``; the ids of new alerts."""
    if reservation.pk is None:
        return []
    with transaction.atomic():
        deleted, _ = BudgetReservation._base_manager.filter(pk=reservation.pk).delete()
        if not deleted:
            return []  # already expired and charged at its worst case
        return _charge(reservation.tenant_id, reservation.budget_ids, reservation.amount, cost, now)


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
    """New alert rows for thresholds this budget's spend has reached this period
    (the row lock makes check-then-insert safe; the unique constraint backs it)."""
    if not budget.limit or not budget.thresholds:
        return []
    percent = budget.spent * 100 / budget.limit
    reached = sorted({int(t) for t in budget.thresholds if isinstance(t, int | float) and percent >= t})
    if not reached:
        return []
    done = set(
        BudgetAlert._base_manager.filter(budget=budget, period_start=budget.period_start).values_list(
            "threshold", flat=True
        )
    )
    created = []
    for threshold in reached:
        if threshold in done:
            continue
        alert = BudgetAlert._base_manager.create(
            tenant_id=budget.tenant_id,
            budget=budget,
            period_start=budget.period_start,
            threshold=threshold,
            spent=budget.spent,
            limit=budget.limit,
        )
        created.append(alert.pk)
    return created


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
