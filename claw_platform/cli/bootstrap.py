"""First-run set-up: migrations when some are pending, then a tenant and its admin.

`claw up` runs this module as a short-lived child (``python -m
claw_platform.cli.bootstrap``) so that the supervising process never loads Django and
stays small; the child reports on stdout as one JSON object, and the generated
password lives only in that pipe and in the banner.
"""

from __future__ import annotations

import json
import secrets
import sys
import zlib
from dataclasses import asdict, dataclass
from typing import Any, TextIO

DEFAULT_ADMIN_USERNAME = "admin"
DEFAULT_TENANT_NAME = "Default"
DEFAULT_TENANT_SLUG = "default"
# Serialises concurrent first runs against one database (two `claw up` on two hosts).
_BOOTSTRAP_LOCK_KEY = zlib.crc32(b"claw-platform-bootstrap")


@dataclass(frozen=True)
class BootstrapResult:
    created: bool
    username: str
    tenant_slug: str
    # Only on the run that created the admin; never stored anywhere.
    password: str | None = None


def bootstrap_first_run(
    *,
    username: str = DEFAULT_ADMIN_USERNAME,
    tenant_name: str = DEFAULT_TENANT_NAME,
    tenant_slug: str = DEFAULT_TENANT_SLUG,
) -> BootstrapResult:
    """Create the default tenant and its admin (a superuser who owns the tenant) unless
    a superuser already exists. Idempotent: a second call creates nothing."""
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from claw_platform.tenancy.actions import do_add_member, do_create_tenant
    from claw_platform.tenancy.models import Role, Tenant

    user_model = get_user_model()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_BOOTSTRAP_LOCK_KEY])
        existing = user_model.objects.filter(is_superuser=True).order_by("pk").first()
        if existing is not None:
            return BootstrapResult(created=False, username=existing.get_username(), tenant_slug=tenant_slug)
        password = secrets.token_urlsafe(18)
        admin = user_model.objects.create_superuser(username=username, email="", password=password)
        tenant = Tenant.objects.filter(slug=tenant_slug).first()
        if tenant is None:
            tenant = do_create_tenant(tenant_name, slug=tenant_slug, acting_user=admin)
        do_add_member(tenant, admin, Role.OWNER, acting_user=admin)
    return BootstrapResult(created=True, username=username, tenant_slug=tenant.slug, password=password)


def pending_migrations() -> list[str]:
    """Names of unapplied migrations; reading the graph is far cheaper than `migrate`,
    whose post-migrate signals alone take a second on every warm start."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{migration.app_label}.{migration.name}" for migration, _ in plan]


def prepare_database(progress: TextIO) -> dict[str, Any]:
    """Migrate if needed, then bootstrap. Progress goes to ``progress`` (the terminal)."""
    from django.core.management import call_command

    pending = pending_migrations()
    if pending:
        print(f"claw: applying {len(pending)} migrations…", file=progress, flush=True)
        call_command("migrate", interactive=False, verbosity=0, stdout=progress)
    else:
        # An install upgraded to the two roles has nothing to migrate: grant anyway.
        from claw_platform.db_roles import as_owner, grant_runtime_privileges

        with as_owner():
            grant_runtime_privileges()
    result = bootstrap_first_run()
    agent = provision_default_agent(result.tenant_slug)
    return {"migrations_applied": len(pending), "default_agent": agent, **asdict(result)}


def provision_default_agent(tenant_slug: str) -> str | None:
    """With provider credentials in the environment, the default tenant gets an
    `assistant` agent on that provider, so a newcomer can chat at once."""
    import os

    from agents.actions.provisioning import ensure_default_agent, provider_from_env
    from claw_platform.tenancy.models import Tenant

    spec = provider_from_env(os.environ)
    tenant = Tenant.objects.filter(slug=tenant_slug).first()
    if spec is None or tenant is None:
        return None
    return ensure_default_agent(tenant, spec).slug


def main() -> int:
    """Entry of the `claw up` preparation child: needs DATABASE_URL from the parent."""
    import os

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "claw_platform.settings")
    django.setup()
    from claw_platform.tenancy.rls import system_bypass

    with system_bypass():  # first-run set-up: migrate, the first tenant, its owner and agent
        report = prepare_database(progress=sys.stderr)
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
