"""What the budget guard adds to an LLM call, and proof it cannot overspend.

1. Latency the guard adds per call (reserve before, settle after, each one short
   transaction with row locks, plus the executor hop): a provider that answers at
   once, called through ``BudgetedProvider`` with three budgets applying (tenant,
   user, agent), and with none. Target p50 < 1 ms.
2. N concurrent calls against a budget that fits K of them (each call's worst case
   is a K-th of the limit): how many reach the provider (must be <= K) and the
   budget's spend afterwards (must be <= its limit).
3. The usage report over 1,000,000 usage records (``--usage-rows``), written in
   batches through the usage table (the rollup trigger runs as in production):
   the insert rate, the rollup's size, and the report page's time (the whole
   ``/reports/usage/`` response, signed in as the owner) and the API's grouped
   query. Target < 300 ms.

    .venv/bin/python bench/budgets/run.py [--calls 500] [--concurrent 20] [--fits 5] [--usage-rows 1000000]

Uses DATABASE_URL if set, else its own embedded PostgreSQL in a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.engine.store_overhead import percentile, setup_django


class InstantProvider:
    name = "instant"

    def __init__(self, delay: float = 0.0, usage: tuple[int, int] = (100, 50)) -> None:
        self.delay = delay
        self.usage = usage
        self.requests = 0

    async def complete(self, request: Any) -> Any:
        from agents.engine.types import LLMResponse, Message, Usage

        self.requests += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        return LLMResponse(Message.assistant("ok"), "end_turn", Usage(*self.usage))


def make_world() -> Any:
    from django.contrib.auth import get_user_model

    from agents.actions.config import do_create_agent, do_create_model_profile, do_create_provider
    from claw_platform.tenancy.actions import do_add_member, do_create_tenant
    from claw_platform.tenancy.models import Role

    tenant = do_create_tenant("Bench", slug="bench-budgets")
    user = get_user_model().objects.create_user(username="bench-budgets", password="x")
    do_add_member(tenant, user, Role.MEMBER)
    provider = do_create_provider(
        tenant, name="p", kind="openai_compatible", base_url="http://127.0.0.1:9/v1"
    )
    model = do_create_model_profile(provider, model="m", input_price=3, output_price=15)
    agent = do_create_agent(tenant, slug="a", name="A", model=model, files={})
    return tenant, user, agent


async def timed_calls(provider: Any, request: Any, calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await provider.complete(request)
        times.append((time.perf_counter() - started) * 1000)
    return times


_USAGE_SQL = """
INSERT INTO agents_usagerecord (tenant_id, agent_id, user_id, provider, model, purpose, input_tokens,
    output_tokens, cache_read_tokens, cache_write_tokens, cost, latency_ms, stop_reason, error, counted,
    created_at, api_key_id, routine_id, run_id)
SELECT %(tenant)s, (%(agents)s::bigint[])[1 + g %% 2], %(user)s, 'p', 'model-' || (g %% 5), 'agent_loop',
    1000 + g %% 500, 200 + g %% 100, 0, 0, 0.001 + (g %% 7) * 0.0005, 100, 'end_turn', '', true,
    now() - ((g %% 90) || ' days')::interval - ((g %% 24) || ' hours')::interval, NULL, NULL, NULL
FROM generate_series(%(first)s, %(last)s) AS g
"""


def report(tenant: Any, user: Any, agent: Any, rows: int) -> None:
    """The report over ``rows`` usage records: written in batches of 50,000 through
    the usage table, so the rollup trigger keeps the daily rows as it would."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from agents.actions.config import do_create_agent
    from agents.budgets.models import UsageDay
    from agents.budgets.usage_report import UsageQuery, usage_rows
    from claw_platform.tenancy.actions import do_add_member
    from claw_platform.tenancy.member_rule import Caller
    from claw_platform.tenancy.models import Role

    second = do_create_agent(tenant, slug="b", name="B", model=agent.model, files={})
    started = time.perf_counter()
    batch = 50_000
    for first in range(0, rows, batch):
        with connection.cursor() as cursor:
            cursor.execute(
                _USAGE_SQL,
                {
                    "tenant": tenant.pk,
                    "agents": [agent.pk, second.pk],
                    "user": user.pk,
                    "first": first,
                    "last": min(rows, first + batch) - 1,
                },
            )
    elapsed = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE budgets_usageday")
        cursor.execute("SELECT count(*) FROM agents_usagerecord WHERE tenant_id = %s", [tenant.pk])
        total = cursor.fetchone()[0]
    days = UsageDay._base_manager.filter(tenant=tenant).count()
    print(
        f"usage records: {total:,} written in {elapsed:.1f} s ({total / elapsed:,.0f} rows/s, rollup trigger "
        f"included); the rollup holds {days:,} rows"
    )
    today = time.strftime("%Y-%m-%d")
    since = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 89 * 86400))
    caller = Caller(tenant.pk, None, None)
    from datetime import date

    query = UsageQuery(date.fromisoformat(since), date.fromisoformat(today), ("day", "agent"))
    api_times = []
    for _ in range(30):
        t0 = time.perf_counter()
        usage_rows(caller, query)
        api_times.append((time.perf_counter() - t0) * 1000)
    owner = get_user_model().objects.create_user(username="bench-owner", password="x")
    do_add_member(tenant, owner, Role.OWNER)
    client = Client(HTTP_HOST="localhost")
    client.force_login(owner)
    page_times = []
    for _ in range(20):
        t0 = time.perf_counter()
        response = client.get(f"/reports/usage/?since={since}&until={today}")
        page_times.append((time.perf_counter() - t0) * 1000)
        assert response.status_code == 200, response.status_code
    print(
        f"report over 90 days of {total:,} usage records: grouped query (day x agent) p50 "
        f"{statistics.median(api_times):.2f} ms; the whole /reports/usage/ page (7 grouped queries, "
        f"rendered) p50 {statistics.median(page_times):.1f} ms, p95 {percentile(page_times, 95):.1f} ms "
        "(target < 300 ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--concurrent", type=int, default=20)
    parser.add_argument("--fits", type=int, default=5)
    parser.add_argument("--usage-rows", type=int, default=1_000_000)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="claw-bench-"))
    db = setup_django(tmp)
    try:
        from agents.budgets.guard import worst_case_cost
        from agents.budgets.models import Budget
        from agents.budgets.provider import BudgetedProvider, estimate_request_tokens
        from agents.budgets.scope import Charge, charging
        from agents.engine.cost import ModelPrice
        from agents.engine.types import LLMRequest, Message

        tenant, user, agent = make_world()
        price = ModelPrice.per_million(3, 15)
        request = LLMRequest(model="m", messages=[Message.user("hello " * 50)], max_tokens=1000)
        charge = Charge(tenant_id=tenant.pk, user_id=user.pk, agent_ids=(agent.pk,))

        wrapped = BudgetedProvider(InstantProvider(), price)

        async def measure(provider: Any) -> list[float]:
            with charging(charge):
                await timed_calls(provider, request, 20)  # warm the pool and caches
                return await timed_calls(provider, request, args.calls)

        from django.db import connection

        trips = []
        for _ in range(200):
            started = time.perf_counter()
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            trips.append((time.perf_counter() - started) * 1000)
        print(f"database round trip (SELECT 1) on this machine now: p50 {statistics.median(trips):.3f} ms")
        base = asyncio.run(measure(InstantProvider()))
        none = asyncio.run(measure(wrapped))
        for scope, extra in (("tenant", {}), ("user", {"user": user}), ("agent", {"agent": agent})):
            Budget.objects.unscoped().create(
                tenant=tenant, scope=scope, limit=Decimal(1_000_000), period="month", **extra
            )
        three = asyncio.run(measure(wrapped))
        # Where the time goes: the guard's two statements alone (in this thread), and
        # the hop to an executor thread and back that each of them takes in a run.
        from agents.budgets.guard import reserve, settle
        from claw_platform.db import db_async

        statements = []
        for _ in range(args.calls):
            started = time.perf_counter()
            held = reserve(charge, model="m", price=price, input_tokens=200, max_output_tokens=1000)
            settle(held, Decimal("0.001"))
            statements.append((time.perf_counter() - started) * 1000)

        async def hops() -> list[float]:
            noop = db_async(lambda: None)
            times = []
            for _ in range(args.calls):
                started = time.perf_counter()
                await noop()
                await noop()
                times.append((time.perf_counter() - started) * 1000)
            return times

        hop = asyncio.run(hops())
        print(
            f"bare provider call: p50 {statistics.median(base):.3f} ms\n"
            f"guarded call, no budget applies:   p50 {statistics.median(none):.3f} ms, "
            f"p95 {percentile(none, 95):.3f} ms\n"
            f"guarded call, three budgets apply: p50 {statistics.median(three):.3f} ms, "
            f"p95 {percentile(three, 95):.3f} ms  (added latency; target p50 < 1 ms)\n"
            f"  of which the reserve and settle statements (one each, three budgets): p50 "
            f"{statistics.median(statements):.3f} ms, p95 {percentile(statements, 95):.3f} ms\n"
            f"  and two executor-thread hops with nothing to do: p50 {statistics.median(hop):.3f} ms, "
            f"p95 {percentile(hop, 95):.3f} ms"
        )
        Budget.objects.unscoped().filter(tenant=tenant).delete()

        worst = worst_case_cost(price, estimate_request_tokens(request), request.max_tokens)
        limit = worst * args.fits
        budget = Budget.objects.unscoped().create(tenant=tenant, limit=limit, period="none")
        # Each call really costs its worst case, so exactly K fit whatever the timing.
        inner = InstantProvider(delay=0.2, usage=(estimate_request_tokens(request), request.max_tokens))
        wrapped = BudgetedProvider(inner, price)

        async def burst() -> list[str]:
            from agents.budgets.errors import BudgetRefused

            async def one() -> str:
                try:
                    await wrapped.complete(request)
                except BudgetRefused as refused:
                    return refused.code
                return "ok"

            with charging(charge):
                return await asyncio.gather(*(one() for _ in range(args.concurrent)))

        results = asyncio.run(burst())
        budget.refresh_from_db()
        verdict = "OK" if inner.requests <= args.fits and budget.spent <= limit else "OVERSPENT"
        print(
            f"{args.concurrent} concurrent calls, budget fits {args.fits}: {inner.requests} provider requests, "
            f"{results.count('budget_exceeded')} refused; spent ${budget.spent} of ${limit} "
            f"(reserved left ${budget.reserved})  {verdict}"
        )
        report(tenant, user, agent, args.usage_rows)
    finally:
        from django.db import connections

        connections.close_all()
        if db is not None:
            db.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
