"""X4: every call of a key counts against its own budget, shared by every web process
(one row per key in PostgreSQL)."""

from __future__ import annotations

import pytest
from django.db import connection

from claw_platform.api import rate_limit
from claw_platform.api.throttling import PrincipalRateThrottle
from tests.api.conftest import client_for, make_key

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_budget_allows_a_burst_then_spaces_calls():
    allowed = [rate_limit.take("t-burst", 5, 60) for _ in range(5)]
    assert allowed == [None] * 5
    wait = rate_limit.take("t-burst", 5, 60)
    assert wait is not None
    assert 11 < wait <= 12  # one call every 12 s
    # 12 s later (moved back in the table): exactly one more call.
    with connection.cursor() as cursor:
        cursor.execute("UPDATE claw_rate_limit SET tat = tat - 12 WHERE key = 't-burst'")
    assert rate_limit.take("t-burst", 5, 60) is None
    assert rate_limit.take("t-burst", 5, 60) is not None


def test_a_budget_of_one():
    assert rate_limit.take("t-one", 1, 10) is None
    wait = rate_limit.take("t-one", 1, 10)
    assert wait is not None
    assert 9 < wait <= 10


def test_idle_keys_are_pruned(monkeypatch):
    monkeypatch.setattr(rate_limit, "PRUNE_EVERY", 1)
    rate_limit.take("t-idle", 5, 60)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE claw_rate_limit SET tat = tat - 3600 WHERE key = 't-idle'")
    rate_limit.take("t-busy", 5, 60)
    with connection.cursor() as cursor:
        cursor.execute("SELECT key FROM claw_rate_limit WHERE key LIKE 't-%%'")
        keys = [row[0] for row in cursor.fetchall()]
    assert "t-idle" not in keys
    assert "t-busy" in keys


def test_a_key_over_its_rate_gets_429_with_retry_after_and_other_keys_do_not(tenant_a, tenant_b, monkeypatch):
    monkeypatch.setattr(PrincipalRateThrottle, "THROTTLE_RATES", {"principal": "3/min"})
    a_client, a_other = client_for(make_key(tenant_a, "read")), client_for(make_key(tenant_a, "read"))
    b_client = client_for(make_key(tenant_b, "read"))
    assert [a_client.get("/api/v1/agents/").status_code for _ in range(3)] == [200] * 3
    refused = a_client.get("/api/v1/agents/")
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "throttled"
    assert 19 <= int(refused["Retry-After"]) <= 20
    assert a_other.get("/api/v1/agents/").status_code == 200
    assert b_client.get("/api/v1/agents/").status_code == 200
