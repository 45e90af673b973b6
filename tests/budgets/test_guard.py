"""R5/Z1: the budget guard around every provider call -- reservation, settlement,
concurrency, unpriced models, rates, kill switch, alerts -- on real PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from agents.budgets.errors import BUDGET_EXCEEDED, LLM_STOPPED, RATE_EXCEEDED, UNPRICED_MODEL, BudgetRefused
from agents.budgets.guard import expire_reservations, reserve, settle, worst_case_cost
from agents.budgets.models import Budget, BudgetAlert, BudgetReservation, KillSwitch, SpendSettings
from agents.budgets.periods import period_bounds
from agents.budgets.provider import BudgetedProvider
from agents.budgets.scope import Charge, charging
from agents.engine.cost import ModelPrice
from agents.engine.types import Completed, LLMRequest, LLMResponse, Message, ProviderError, TextDelta, Usage
from claw_platform.audit.models import AuditEvent

pytestmark = pytest.mark.django_db(transaction=True)

PRICE = ModelPrice.per_million(input=10, output=10)  # $0.00001 a token


def budget(ts, **kwargs):
    values = {"tenant": ts.tenant, "limit": Decimal("1"), "period": "month"} | kwargs
    return Budget.objects.unscoped().create(**values)


class CountingProvider:
    """A provider that answers after ``delay`` and counts the requests it got."""

    name = "counting"

    def __init__(self, usage: Usage, delay: float = 0.0, deltas: int = 0, cut_after: int | None = None):
        self.usage = usage
        self.delay = delay
        self.deltas = deltas
        self.cut_after = cut_after
        self.requests = 0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests += 1
        await asyncio.sleep(self.delay)
        return LLMResponse(Message.assistant("ok"), "end_turn", self.usage)

    async def stream(self, request: LLMRequest):
        self.requests += 1
        for i in range(self.deltas):
            if self.cut_after is not None and i == self.cut_after:
                raise ProviderError("stream", "the connection was cut")
            await asyncio.sleep(self.delay)
            yield TextDelta("abcd")
        yield Completed("end_turn", self.usage)


def request(max_tokens: int = 1000) -> LLMRequest:
    return LLMRequest(model="m", messages=[Message.user("hello")], max_tokens=max_tokens)


def charge_of(ts, **kwargs) -> Charge:
    return Charge(tenant_id=ts.tenant.pk, user_id=ts.member.pk, agent_ids=(ts.agent.pk,), **kwargs)


def test_worst_case_is_input_estimate_plus_max_output_at_the_dearer_prices():
    price = ModelPrice.per_million(input=3, output=15, cache_write=3.75)
    assert worst_case_cost(price, 1000, 2000) == Decimal("0.03375000")


def test_a_call_is_reserved_then_settled_at_its_real_cost(tenant_a):
    b = budget(tenant_a)
    held = reserve(charge_of(tenant_a), model="m", price=PRICE, input_tokens=100, max_output_tokens=900)
    b.refresh_from_db()
    assert b.reserved == Decimal("0.01")
    assert b.spent == 0
    settle(held, Decimal("0.002"))
    b.refresh_from_db()
    assert (b.reserved, b.spent) == (Decimal(0), Decimal("0.002"))
    assert not BudgetReservation.objects.unscoped().exists()


def test_over_budget_is_refused_naming_the_budget_and_its_reset_and_audited(tenant_a):
    b = budget(tenant_a, name="Team", limit=Decimal("0.005"))
    with pytest.raises(BudgetRefused) as refused:
        reserve(charge_of(tenant_a), model="m", price=PRICE, input_tokens=100, max_output_tokens=900)
    assert refused.value.code == BUDGET_EXCEEDED
    assert refused.value.budget_id == b.pk
    assert "'Team'" in refused.value.message
    assert "resets" in refused.value.message
    assert refused.value.reset_at == period_bounds("month", tz="UTC")[1]
    audit = AuditEvent.objects.unscoped().get(action="budget.refused")
    assert audit.tenant_id == tenant_a.tenant.pk
    assert audit.diff["code"] == BUDGET_EXCEEDED


def test_only_budgets_that_apply_to_the_call_are_charged(tenant_a, tenant_b):
    mine = budget(tenant_a, scope="user", user=tenant_a.member)
    someone_else = budget(tenant_a, scope="user", user=tenant_a.admin, limit=Decimal("0"))
    other_tenant = budget(tenant_b, limit=Decimal("0"))
    held = reserve(charge_of(tenant_a), model="m", price=PRICE, input_tokens=10, max_output_tokens=10)
    assert held.budget_ids == (mine.pk,)
    for row in (someone_else, other_tenant):
        row.refresh_from_db()
        assert row.reserved == 0


def test_a_model_without_a_price_is_refused_under_a_money_budget(tenant_a, settings):
    budget(tenant_a)
    unknown = ModelPrice.per_million(input=None, output=None)
    with pytest.raises(BudgetRefused) as refused:
        reserve(charge_of(tenant_a), model="mystery", price=unknown, input_tokens=1, max_output_tokens=1)
    assert refused.value.code == UNPRICED_MODEL
    assert "mystery has no price" in refused.value.message
    settings.CLAW_BUDGET_ALLOW_UNPRICED = True
    reserve(charge_of(tenant_a), model="mystery", price=unknown, input_tokens=1, max_output_tokens=1)


def test_a_free_model_passes_a_zero_budget(tenant_a):
    budget(tenant_a, limit=Decimal("0"))
    free = ModelPrice.per_million(input=0, output=0)
    reserve(charge_of(tenant_a), model="local", price=free, input_tokens=1000, max_output_tokens=1000)


def test_the_call_rate_per_hour_is_enforced(tenant_a):
    budget(tenant_a, scope="agent", agent=tenant_a.agent, limit=None, calls_per_hour=2)
    for _ in range(2):
        reserve(charge_of(tenant_a), model="m", price=PRICE, input_tokens=1, max_output_tokens=1)
    with pytest.raises(BudgetRefused) as refused:
        reserve(charge_of(tenant_a), model="m", price=PRICE, input_tokens=1, max_output_tokens=1)
    assert refused.value.code == RATE_EXCEEDED
    later = datetime.now(UTC) + timedelta(hours=1)
    reserve(charge_of(tenant_a), model="m", price=PRICE, input_tokens=1, max_output_tokens=1, now=later)


def test_the_kill_switch_refuses_every_call_of_its_tenant_or_agent(tenant_a, tenant_b):
    switch = KillSwitch.objects.unscoped().create(
        tenant=tenant_a.tenant, agent=tenant_a.agent, reason="runaway"
    )
    with pytest.raises(BudgetRefused) as refused:
        reserve(charge_of(tenant_a), model="m", price=PRICE, input_tokens=1, max_output_tokens=1)
    assert refused.value.code == LLM_STOPPED
    assert "runaway" in refused.value.message
    reserve(
        Charge(tenant_id=tenant_b.tenant.pk, agent_ids=(tenant_b.agent.pk,)),
        model="m",
        price=PRICE,
        input_tokens=1,
        max_output_tokens=1,
    )
    KillSwitch.objects.unscoped().filter(pk=switch.pk).update(active=False)
    reserve(charge_of(tenant_a), model="m", price=PRICE, input_tokens=1, max_output_tokens=1)


def test_periods_follow_the_tenant_time_zone(tenant_a):
    SpendSettings.objects.unscoped().create(tenant=tenant_a.tenant, timezone="Asia/Tokyo")
    b = budget(tenant_a, period="day", limit=Decimal("0.01"))
    # 23:30 UTC is 08:30 the next day in Tokyo: a new day there.
    evening = datetime(2026, 3, 1, 14, 0, tzinfo=UTC)
    held = reserve(
        charge_of(tenant_a), model="m", price=PRICE, input_tokens=500, max_output_tokens=500, now=evening
    )
    settle(held, Decimal("0.01"), now=evening)
    with pytest.raises(BudgetRefused) as refused:
        reserve(charge_of(tenant_a), model="m", price=PRICE, input_tokens=1, max_output_tokens=1, now=evening)
    assert "Asia/Tokyo" in refused.value.message
    next_day_tokyo = datetime(2026, 3, 1, 15, 30, tzinfo=UTC)
    reserve(
        charge_of(tenant_a), model="m", price=PRICE, input_tokens=1, max_output_tokens=1, now=next_day_tokyo
    )
    b.refresh_from_db()
    assert b.period_start == datetime(2026, 3, 1, 15, 0, tzinfo=UTC)


def test_each_threshold_alerts_once_per_period(tenant_a):
    b = budget(tenant_a, thresholds=[50, 80])
    for cost in ("0.3", "0.3", "0.1", "0.15", "0.01"):
        held = reserve(charge_of(tenant_a), model="m", price=PRICE, input_tokens=1, max_output_tokens=1)
        settle(held, Decimal(cost))
    alerts = list(BudgetAlert.objects.unscoped().filter(budget=b).order_by("threshold"))
    assert [a.threshold for a in alerts] == [50, 80]
    assert AuditEvent.objects.unscoped().filter(action="budget.alert").count() == 2
    # Next month the same thresholds alert again.
    next_month = period_bounds("month", tz="UTC")[1] + timedelta(hours=1)
    held = reserve(
        charge_of(tenant_a), model="m", price=PRICE, input_tokens=1, max_output_tokens=1, now=next_month
    )
    settle(held, Decimal("0.6"), now=next_month)
    assert BudgetAlert.objects.unscoped().filter(budget=b, threshold=50).count() == 2


def test_a_crashed_workers_reservation_expires_charged_at_its_worst_case(tenant_a):
    b = budget(tenant_a)
    held = reserve(charge_of(tenant_a), model="m", price=PRICE, input_tokens=100, max_output_tokens=900)
    assert expire_reservations() == 0
    assert expire_reservations(datetime.now(UTC) + timedelta(days=1)) == 1
    b.refresh_from_db()
    assert (b.reserved, b.spent) == (Decimal(0), Decimal("0.01"))
    settle(held, Decimal("0.001"))  # the late settlement changes nothing
    b.refresh_from_db()
    assert b.spent == Decimal("0.01")


def test_twenty_concurrent_calls_against_a_budget_for_five_make_five_requests(tenant_a):
    b = budget(tenant_a, limit=Decimal("0.05"))  # each call's worst case is 0.01
    inner = CountingProvider(Usage(100, 900), delay=0.3)
    provider = BudgetedProvider(inner, PRICE)

    async def one() -> str:
        try:
            await provider.complete(request(max_tokens=990))
        except BudgetRefused as refused:
            return refused.code
        return "ok"

    async def main() -> list[str]:
        with charging(charge_of(tenant_a)):
            return await asyncio.gather(*(one() for _ in range(20)))

    results = asyncio.run(main())
    assert inner.requests == 5
    assert results.count("ok") == 5
    assert results.count(BUDGET_EXCEEDED) == 15
    b.refresh_from_db()
    assert b.spent <= b.limit
    assert b.reserved == 0


def test_a_stream_cut_midway_is_settled_at_what_it_produced(tenant_a):
    b = budget(tenant_a)
    provider = BudgetedProvider(CountingProvider(Usage(100, 100), deltas=10, cut_after=5), PRICE)

    async def main() -> None:
        with charging(charge_of(tenant_a)), pytest.raises(ProviderError):
            async for _ in provider.stream(request()):
                pass

    asyncio.run(main())
    b.refresh_from_db()
    assert b.reserved == 0
    # The prompt (estimated) plus 5 deltas of 4 characters: 5 output tokens.
    assert Decimal(0) < b.spent < Decimal("0.001")
    assert b.spent == (Decimal(b.spent * 100_000)).quantize(Decimal(1)) / 100_000


def test_a_streamed_and_a_plain_call_of_the_same_size_cost_the_same(tenant_a):
    b = budget(tenant_a)
    provider = BudgetedProvider(CountingProvider(Usage(300, 200), deltas=3), PRICE)

    async def main() -> None:
        with charging(charge_of(tenant_a)):
            await provider.complete(request())
            spent_plain = await _spent(b)
            async for _ in provider.stream(request()):
                pass
            assert await _spent(b) == 2 * spent_plain

    asyncio.run(main())


async def _spent(b: Budget) -> Decimal:
    from asgiref.sync import sync_to_async

    return await sync_to_async(lambda: Budget.objects.unscoped().get(pk=b.pk).spent)()


def test_a_cancelled_stream_is_settled(tenant_a):
    b = budget(tenant_a)
    provider = BudgetedProvider(CountingProvider(Usage(100, 100), deltas=50, delay=0.05), PRICE)

    async def consume() -> None:
        async for _ in provider.stream(request()):
            pass

    async def main() -> None:
        with charging(charge_of(tenant_a)):
            task = asyncio.ensure_future(consume())
            await asyncio.sleep(0.5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.sleep(0.3)  # the shielded settlement finishes

    asyncio.run(main())
    b.refresh_from_db()
    assert b.reserved == 0
    assert b.spent > 0


def test_a_call_with_no_charge_in_context_is_refused(tenant_a):
    provider = BudgetedProvider(CountingProvider(Usage(1, 1)), PRICE)
    with pytest.raises(BudgetRefused):
        asyncio.run(provider.complete(request()))


def test_the_workers_schedule_expires_unsettled_reservations(tenant_a):
    from django_q.models import Schedule

    from agents.runtime.maintenance import ensure_schedules, expire_budget_reservations_task

    ensure_schedules()
    assert Schedule.objects.filter(name="claw.expire_budget_reservations").exists()
    budget(tenant_a)
    reserve(charge_of(tenant_a), model="m", price=PRICE, input_tokens=100, max_output_tokens=900)
    BudgetReservation.objects.unscoped().update(expires_at=datetime.now(UTC) - timedelta(seconds=1))
    assert expire_budget_reservations_task() == 1
    assert not BudgetReservation.objects.unscoped().exists()
