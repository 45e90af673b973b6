"""`claw unlock <username|address> …`: lift sign-in lock-outs (claw_platform.signin).
A username forgets that account's failed sign-ins from every address; an IP address
forgets that address's, for every account. Each unlock is an audit event."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("unlock", help="lift sign-in lock-outs of an account or an address")
    parser.add_argument("targets", nargs="+", metavar="USERNAME|ADDRESS", help="a username or an IP address")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from claw_platform.cli.environment import prepare_environment

    database = prepare_environment()
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
        return unlock(args.targets)
    finally:
        if database is not None and database.started_here:
            database.stop()


def unlock(targets: list[str]) -> int:
    from claw_platform.signin.actions import do_unlock_sign_in, is_address

    for target in targets:
        removed = do_unlock_sign_in(target, acting_user="claw unlock")
        what = "address" if is_address(target) else "account"
        print(f"{what} {target}: {removed} failed sign-in record(s) removed; it may sign in again")
    return 0
