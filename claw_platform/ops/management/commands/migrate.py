"""Django's ``migrate``, connected as the owner role (``DATABASE_OWNER_URL``): the
product's own role owns no table and cannot create one. Every path that migrates
(`claw migrate`, `claw up`, ``manage.py migrate``, the test database's set-up) goes
through here."""

from __future__ import annotations

from typing import Any

from django.core.management.commands.migrate import Command as DjangoMigrate

from claw_platform.db_roles import as_owner
from claw_platform.tenancy.rls import system_bypass


class Command(DjangoMigrate):
    def handle(self, *args: Any, **options: Any) -> None:
        # Data migrations and post_migrate handlers touch every tenant's rows: the owner
        # is bound by the forced policies too, so they run under the system bypass.
        with as_owner(options["database"]), system_bypass():
            super().handle(*args, **options)
