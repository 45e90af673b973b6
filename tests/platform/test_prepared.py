"""Prepared statements on Django's connection (claw_platform.prepared)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.test import override_settings

from agents.runtime.claims import _CLAIM_SQL, _LOCK_SQL, claim_params
from claw_platform.prepared import prepared_cursor
from claw_platform.tenancy.models import Tenant

pytestmark = pytest.mark.django_db(transaction=True)

PROBE = "SELECT count(*) FROM tenancy_tenant WHERE slug = %s"


def prepared_statements() -> list[tuple[str, int, int]]:
    """(statement, generic plans, custom plans) prepared on this connection."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
        return [(" ".join(row[0].split()), row[1], row[2]) for row in cursor.fetchall()]


def probe_rows() -> list[Any]:
    return [row for row in prepared_statements() if row[0].startswith("SELECT count(*) FROM tenancy_tenant")]


def test_a_statement_is_prepared_once_per_connection_and_answers_each_time() -> None:
    Tenant.objects.create(name="Acme", slug="acme")
    for slug, expected in (("acme", 1), ("nobody", 0), ("acme", 1)):
        with prepared_cursor() as cursor:
            cursor.execute(PROBE, [slug])
            assert cursor.fetchone() == (expected,)
    assert len(probe_rows()) == 1


def test_django_s_own_statements_stay_unprepared() -> None:
    with prepared_cursor() as cursor:
        cursor.execute(PROBE, ["x"])
    before = prepared_statements()
    for _ in range(10):  # psycopg's default threshold is 5
        list(Tenant.objects.filter(slug="same"))
    assert prepared_statements() == before


@override_settings(CLAW_DB_PREPARE=False)
def test_turned_off_the_statement_runs_unprepared() -> None:
    for _ in range(3):
        with prepared_cursor() as cursor:
            cursor.execute(PROBE, ["x"])
            assert cursor.fetchone() == (0,)
    assert probe_rows() == []


def test_errors_are_django_s_and_the_statement_is_in_the_caller_s_transaction() -> None:
    insert = "INSERT INTO tenancy_tenant (name, slug, created_at, is_active) VALUES (%s, %s, now(), true)"
    try:
        with transaction.atomic():
            with prepared_cursor() as cursor:
                cursor.execute(insert, ["Kept back", "kept-back"])
            raise RuntimeError("the caller's transaction fails")
    except RuntimeError:
        pass
    assert not Tenant.objects.filter(slug="kept-back").exists()
    Tenant.objects.create(name="Taken", slug="taken")
    with pytest.raises(IntegrityError), prepared_cursor() as cursor:
        cursor.execute(insert, ["Taken again", "taken"])


def test_the_run_claim_is_planned_once_not_per_claim() -> None:
    for _ in range(8):
        with transaction.atomic(), prepared_cursor() as cursor:
            cursor.execute(_LOCK_SQL, [1])
            cursor.execute(_CLAIM_SQL, {**claim_params("test"), "runs": [1, 2], "limit": 1})
    [claim] = [row for row in prepared_statements() if row[0].startswith("WITH cand AS")]
    assert claim[1:] == (8, 0)  # eight executions of its generic plan, no per-call plan
