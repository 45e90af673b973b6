"""Row-level security (issue 22 item 1, Z2): the database's own wall between tenants.

Every table with a ``tenant_id`` column (every concrete ``TenantOwned`` model, and
any other) gets ``ENABLE`` + ``FORCE ROW LEVEL SECURITY`` and the policy
``claw_tenant``, applied idempotently after every migrate (``apply_after_migrate``),
so tables other branches add later are covered without them doing anything.

The tenancy context (``claw_platform.tenancy.context``) is mirrored into two session
settings of whichever connection runs the next statement (``_execute_wrapper``,
an execute wrapper on every Django connection, and ``claw_platform.prepared`` for its
raw cursor): ``claw.tenant_id`` and ``claw.rls_bypass``. Inside ``tenant_context(A)``
— web requests, sockets, tasks, workers and commands all enter one — every
statement, a forgotten scope, ``.unscoped()`` or raw SQL alike, sees and writes only
tenant A's rows. The settings are set only when they change (a statement per change,
not per query), travel with the connection (pooled connections included) and are set
again after a rollback, which undoes them.

Strict (``CLAW_RLS_STRICT``, the default): with no tenant in context the policy
passes no row and allows no write. Only :func:`system_bypass` (``all_tenants()``,
the same scope: one mechanism) sets ``claw.rls_bypass = 'on'`` and crosses tenants;
every use is system code with a comment saying why (``grep -rn system_bypass``).
Not strict: no tenant in context sees every row (the policy of before), for an
installation whose integration finds a path not yet moved into the bypass.
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
# Each setting read in a scalar subquery: PostgreSQL evaluates it once per statement
# (an InitPlan), not once per row, and compares tenant_id with a constant.
_EMPTY = "nullif(current_setting('claw.tenant_id', true), '')"
_TENANT = f"(SELECT {_EMPTY}::bigint)"
_BYPASS = "(SELECT current_setting('claw.rls_bypass', true) = 'on')"
STRICT_EXPRESSION = f"(tenant_id = {_TENANT} OR {_BYPASS})"
LENIENT_EXPRESSION = f"({_TENANT} IS NULL OR tenant_id = {_TENANT} OR {_BYPASS})"
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


def policy_expression(strict: bool | None = None) -> str:
    """The policy's test; ``strict`` defaults to the ``CLAW_RLS_STRICT`` setting."""
    if strict is None:
        from django.conf import settings

        strict = bool(getattr(settings, "CLAW_RLS_STRICT", True))
    return STRICT_EXPRESSION if strict else LENIENT_EXPRESSION


def policy_statements(table: str, quote: Any, *, strict: bool | None = None) -> list[str]:
    t = quote(table)
    expression = policy_expression(strict)
    return [
        f"ALTER TABLE {t} ENABLE ROW LEVEL SECURITY",
        f"ALTER TABLE {t} FORCE ROW LEVEL SECURITY",
        f"DROP POLICY IF EXISTS {POLICY} ON {t}",
        f"CREATE POLICY {POLICY} ON {t} USING {expression} WITH CHECK {expression}",
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


def _wanted() -> tuple[str, str]:
    """(``claw.tenant_id``, ``claw.rls_bypass``) for the scope in context."""
    from claw_platform.tenancy.context import _scope

    scope = _scope.get()
    if scope is None:
        return ("", "off")
    if scope.all_tenants:
        return ("", "on")
    return ("" if scope.tenant_id is None else str(int(scope.tenant_id)), "off")


_SET_BOTH = "SELECT set_config(%s, %s, false), set_config(%s, %s, false)"


def sync_raw(raw: Any) -> None:
    """Make ``raw`` (a psycopg connection) carry the tenant (or the bypass) in context."""
    import psycopg.pq

    wanted = _wanted()
    if getattr(raw, _CACHE_ATTR, None) == wanted:
        return
    status = raw.info.transaction_status
    if status == psycopg.pq.TransactionStatus.INERROR:
        return  # the statement fails anyway; the setting is made on the next one
    tenant, bypass = wanted
    with raw.cursor() as cursor:
        cursor.execute(_SET_BOTH, [TENANT_SETTING, tenant, BYPASS_SETTING, bypass])
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


BYPASS_OPTION = f"-c {BYPASS_SETTING}=on"


def system_connection_params(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` (psycopg keyword arguments) for a connection of system code's own, kept
    for cross-tenant work outside Django's connections (the run dispatcher's claims):
    the bypass is made when it connects (``options=-c claw.rls_bypass=on``). The other
    half of :func:`system_bypass`; grep for both."""
    options = " ".join(part for part in (params.get("options"), BYPASS_OPTION) if part)
    return {**params, "options": options}


@contextmanager
def system_bypass() -> Iterator[None]:
    """THE explicit escape from row-level security, for system code that must read or
    write across tenants (run claims, the sweeper, group commits, token -> tenant
    look-ups), even inside a tenant's context: the scope of ``all_tenants()``, whose
    statements run with ``claw.rls_bypass = 'on'``. A ``tenant_context`` entered inside
    it binds to that tenant again. Grep for ``system_bypass`` to find every use; each
    carries a comment saying why."""
    from claw_platform.tenancy.context import all_tenants

    with all_tenants():
        yield
