"""Switch row-level security off and on again on every tenant table, for the benches
that compare the same workload with and without it in one run (bench/api,
bench/engine). Uses a plain connection as the owner role (the product's runtime role
may not alter tables); ``ALTER TABLE`` waits for the tables' locks, so call it
between phases, with the servers idle."""

from __future__ import annotations


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def set_row_level_security(owner_url: str, enabled: bool) -> int:
    """Enable (the product's forced ``claw_tenant`` policy, as after a migrate) or
    disable row-level security on every tenant table; the count of tables."""
    import psycopg

    from claw_platform.tenancy.rls import policy_statements, tenant_tables

    with psycopg.connect(owner_url, autocommit=True) as conn:
        existing = {
            row[0] for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        }
        tables = [table for table in tenant_tables() if table in existing]
        for table in tables:
            if enabled:
                statements = policy_statements(table, _quote)
            else:
                statements = [f"ALTER TABLE {_quote(table)} DISABLE ROW LEVEL SECURITY"]
            for statement in statements:
                conn.execute(statement)  # type: ignore[arg-type]
    return len(tables)
