#!/usr/bin/env python
"""What row-level security costs (issue 22 item 1).

    .venv/bin/python bench/rls/run.py [--rows 20000] [--queries 500] [--runs 50] [--rounds 5]

Starts an embedded PostgreSQL of its own (temporary), connects as the runtime role
(not owner, no BYPASSRLS) through Django's connection, with the product's execute
wrapper that mirrors the tenancy context into ``claw.tenant_id``. Two identical
tables of ``--rows`` rows over 2 tenants: one with the product's forced policy
(``claw_platform.tenancy.rls.policy_statements``), one without. Prints:

1. per query: a primary-key SELECT inside one tenant's context, on each table
   (median of blocks, alternating so both see the same machine load);
2. per run: 30 statements (20 reads, 10 updates) in a context entered for the run,
   alternating two tenants so every run pays the setting's change, against the same
   statements on the plain table with no context.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from claw_platform.embedded_db import start_embedded_database

    run_dir = Path(tempfile.mkdtemp(prefix="claw-bench-rls-"))
    os.environ["CLAW_VAR_DIR"] = str(run_dir / "var")
    os.environ["DJANGO_SETTINGS_MODULE"] = "claw_platform.settings"
    # A SIGTERM (a timeout) unwinds like Ctrl+C, so the server is stopped.
    signal.signal(signal.SIGTERM, _interrupt)
    db = start_embedded_database(run_dir / "pgdata")
    os.environ["DATABASE_URL"] = db.url
    os.environ["DATABASE_OWNER_URL"] = db.owner_url
    try:
        return bench(args)
    finally:
        db.stop()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def bench(args: argparse.Namespace) -> int:
    import django

    django.setup()
    from django.db import connection

    from claw_platform.db_roles import as_owner
    from claw_platform.tenancy.context import tenant_context
    from claw_platform.tenancy.rls import policy_statements

    with as_owner(), connection.cursor() as cursor:
        for table in ("bench_rls", "bench_plain"):
            cursor.execute(f"DROP TABLE IF EXISTS {table}")
            cursor.execute(
                f"CREATE TABLE {table} (id bigint PRIMARY KEY, tenant_id bigint NOT NULL, n int NOT NULL, "
                "payload text NOT NULL)"
            )
            cursor.execute(f"CREATE INDEX ON {table} (tenant_id)")
            cursor.execute(
                f"INSERT INTO {table} SELECT i, 1 + i %% 2, 0, md5(i::text) FROM generate_series(1, %s) i",
                [args.rows],
            )
            cursor.execute(f"ANALYZE {table}")
        for statement in policy_statements("bench_rls", connection.ops.quote_name):
            cursor.execute(statement)
    connection.close()

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_user, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
        )
        print("connected as {} (superuser {}, bypassrls {})".format(*cursor.fetchone()))
        cursor.execute("SELECT count(*) FROM bench_rls")
        print(
            f"rows visible with no tenant in context: {cursor.fetchone()[0]} (strict: none; system code bypasses)"
        )
    with tenant_context(1), connection.cursor() as cursor:
        cursor.execute("SELECT count(*), count(*) FILTER (WHERE tenant_id <> 1) FROM bench_rls")
        total, others = cursor.fetchone()
        print(f"rows visible in tenant 1's context: {total}, of another tenant: {others}")

    ids = [i for i in range(1, args.rows + 1) if i % 2 == 1]  # tenant 2's rows are i % 2 == 1

    def per_query(table: str) -> float:
        started = time.perf_counter()
        with tenant_context(2), connection.cursor() as cursor:
            for k in range(args.queries):
                cursor.execute(f"SELECT payload FROM {table} WHERE id = %s", [ids[k % len(ids)]])
                cursor.fetchone()
        return (time.perf_counter() - started) / args.queries * 1e6

    def per_run(table: str, with_context: bool) -> float:
        started = time.perf_counter()
        for run in range(args.runs):
            tenant = 1 + run % 2
            rows = [i for i in ids[:20]] if tenant == 2 else [i + 1 for i in ids[:20]]

            def statements(rows: list[int] = rows) -> None:
                with connection.cursor() as cursor:
                    for i in rows:
                        cursor.execute(f"SELECT payload FROM {table} WHERE id = %s", [i])
                        cursor.fetchone()
                    for i in rows[:10]:
                        cursor.execute(f"UPDATE {table} SET n = n + 1 WHERE id = %s", [i])

            if with_context:
                with tenant_context(tenant):
                    statements()
            else:
                statements()
        return (time.perf_counter() - started) / args.runs * 1e6

    per_query("bench_rls"), per_query("bench_plain")  # warm up
    q_rls, q_plain, r_rls, r_plain = [], [], [], []
    for _ in range(args.rounds):
        q_rls.append(per_query("bench_rls"))
        q_plain.append(per_query("bench_plain"))
        r_rls.append(per_run("bench_rls", True))
        r_plain.append(per_run("bench_plain", False))
    qr, qp = statistics.median(q_rls), statistics.median(q_plain)
    rr, rp = statistics.median(r_rls), statistics.median(r_plain)
    print(f"per query (pk SELECT): RLS {qr:.1f} us, plain {qp:.1f} us, ratio {qr / qp:.3f}")
    print(
        f"per run (30 statements, context switch each run): RLS {rr:.0f} us, plain {rp:.0f} us, ratio {rr / rp:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
