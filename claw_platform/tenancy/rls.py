"""Row-level security (issue 22 item 1, Z2): the database's own wall between tenants.

Every table with a ``tenant_id`` column (every concrete ``TenantOwned`` model, and
any other) gets ``ENABLE`` + ``FORCE ROW LEVEL SECURITY`` and the policy
``claw_tenant``, applied idempotently after every migrate (``apply_after_migrate``),
so tables other branches add later are covered without them doing anything.

The tenancy context (``claw_platform.tenancy.context``) is mirrored into the session
setting ``claw.tenant_id`` of whichever connection runs the next statement
(:func:`sync_connection`, an execute wrapper on every Django connection, and
``claw_platform.prepared`` for its raw cursor): inside ``tenant_context(A)`` — web
requests, sockets, tasks, workers and commands all enter one — every statement, a
forgotten scope, ``.unscoped()`` or raw SQL alike, sees and writes only tenant A's
rows. The setting is set only when it changes (a statement per change, not per
query), travels with the connection (pooled connections included) and is set again
after a rollback, which undoes it.

``all_tenants()`` and code with no tenant in context run with the setting empty,
which the policy lets through: the cross-tenant system paths (run claims, the relay
pump, the sweeper) work unchanged. Making "no tenant" see nothing needs those paths
to enter :func:`system_bypass` first; see the README for what is enforced today.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.apps import apps
from django.db import connections

POLICY = "claw_tenant"
TENANT_SETTING = "claw.tenant_id"
BYPASS_SETTING = "claw.rls_bypass"
_EMPTY = "nullif(current_setting('claw.tenant_id', true), '')"
POLICY_EXPRESSION = (
    f"({_EMPTY} IS NULL OR tenant_id = {_EMPTY}::bigint OR current_setting('claw.rls_bypass', true) = 'on')"
)
_CACHE_ATTR = "_claw_tenant_setting"


def tenant_tables() -> list[str]:
    """Every concrete model's table that has a ``tenant_id`` column."""
    tables: set[str] = set()
    for model in apps.get_models(include_auto_created=True):
        meta = model._meta
        if meta.abstract or meta.proxy or not meta.managed:
            continue
        if any(getattr(field, "attname", None) == "tenant_id" for field in meta.concrete_fields):
            tables.add(meta.db_table)
    return sorted(tables)


def policy_statements(table: str, quote: Any) -> list[str]:
    t = quote(table)
    return [
        f"ALTER TABLE {t} ENABLE ROW LEVEL SECURITY",
        f"ALTER TABLE {t} FORCE ROW LEVEL SECURITY",
        f"DROP POLICY IF EXISTS {POLICY} ON {t}",
        f"CREATE POLICY {POLICY} ON {t} USING {POLICY_EXPRESSION} WITH CHECK {POLICY_EXPRESSION}",
    ]


def apply_row_level_security(using: str = "default") -> list[str]:
    """Enable, force and (re)create the policy on every tenant table; returns them."""
    connection = connections[using]
    existing = set(connection.introspection.table_names())
    tables = [t for t in tenant_tables() if t in existing]
    with connection.cursor() as cursor:
        for table in tables:
            for statement in policy_statements(table, connection.ops.quote_name):
                cursor.execute(statement)
    return tables


def apply_after_migrate(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """post_migrate, as the owner (``flush`` sends post_migrate too, as the runtime
    role, which may not alter tables: nothing to do then)."""
    from claw_platform.db_roles import is_owner_connection

    if is_owner_connection(using):
        apply_row_level_security(using)


def _wanted() -> str:
    from claw_platform.tenancy.context import _scope

    scope = _scope.get()
    if scope is None or scope.all_tenants or scope.tenant_id is None:
        return ""
    return str(int(scope.tenant_id))


def sync_raw(raw: Any) -> None:
    """Make ``raw`` (a psycopg connection) carry the tenant in context."""
    import psycopg.pq

    wanted = _wanted()
    if getattr(raw, _CACHE_ATTR, None) == wanted:
        return
    status = raw.info.transaction_status
    if status == psycopg.pq.TransactionStatus.INERROR:
        return  # the statement fails anyway; the setting is made on the next one
    with raw.cursor() as cursor:
        cursor.execute("SELECT set_config(%s, %s, false)", [TENANT_SETTING, wanted])
    setattr(raw, _CACHE_ATTR, wanted)


def forget_setting(wrapper: Any) -> None:
    """A rollback undoes a setting made in the transaction: set it again next time."""
    raw = getattr(wrapper, "connection", None)
    if raw is not None and hasattr(raw, _CACHE_ATTR):
        delattr(raw, _CACHE_ATTR)


def _execute_wrapper(execute: Any, sql: Any, params: Any, many: bool, context: dict[str, Any]) -> Any:
    raw = context["connection"].connection
    if raw is not None:
        sync_raw(raw)
    return execute(sql, params, many, context)


def install(sender: Any, connection: Any, **kwargs: Any) -> None:
    """connection_created: every Django connection mirrors the tenancy context."""
    if getattr(connection, "_claw_rls_installed", False):
        return
    connection._claw_rls_installed = True
    connection.execute_wrappers.append(_execute_wrapper)
    for name in ("_rollback", "_savepoint_rollback"):
        original = getattr(connection, name)

        def rolled_back(*args: Any, _original: Any = original, _wrapper: Any = connection) -> Any:
            forget_setting(_wrapper)
            return _original(*args)

        setattr(connection, name, rolled_back)


@contextmanager
def system_bypass(using: str = "default") -> Iterator[None]:
    """THE explicit escape from row-level security, for system code that must read or
    write across tenants even inside a tenant's context. Grep for ``system_bypass``
    to find every use."""
    from claw_platform.tenancy.context import all_tenants

    with all_tenants():
        yield
