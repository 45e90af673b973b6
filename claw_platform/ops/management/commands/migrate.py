"""Django's ``migrate``, connected as the owner role (``DATABASE_OWNER_URL``): the
product's own role owns no table and cannot create one. Every path that migrates
(`claw migrate`, `claw up`, ``manage.py migrate``, the test database's set-up) goes
through here."""

from __future__ import annotations

from typing import Any

from django.core.management.commands.migrate import Command as DjangoMigrate

from claw_platform.db_roles import as_owner


class Command(DjangoMigrate):
    def handle(self, *args: Any, **options: Any) -> None:
        with as_owner(options["database"]):
            super().handle(*args, **options)
