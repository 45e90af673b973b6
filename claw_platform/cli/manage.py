"""`claw manage …` (any Django command) and `claw migrate`, with the database handled
as manage.py does: DATABASE_URL if set, else the embedded server, which is stopped
afterwards only if this command started it (never the one `claw up` runs)."""

from __future__ import annotations

import argparse
from typing import Any

HELP_MANAGE = "run a Django management command (claw manage help)"
HELP_MIGRATE = "apply pending migrations"


def register(subparsers: Any) -> None:
    manage = subparsers.add_parser("manage", help=HELP_MANAGE, add_help=False)
    manage.set_defaults(func=run_manage, pass_through=True)
    migrate = subparsers.add_parser("migrate", help=HELP_MIGRATE, add_help=False)
    migrate.set_defaults(func=run_migrate, pass_through=True)


def run_manage(args: argparse.Namespace) -> int:
    return execute(list(args.django_args) or ["help"])


def run_migrate(args: argparse.Namespace) -> int:
    return execute(["migrate", *args.django_args])


def execute(django_args: list[str]) -> int:
    from claw_platform.cli.environment import prepare_environment

    database = prepare_environment()
    try:
        from django.core.management import execute_from_command_line

        execute_from_command_line(["claw manage", *django_args])
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        if database is not None and database.started_here:
            database.stop()
    return 0
