"""`claw apikey create --tenant <slug> --name <name> [--scope read|write|admin …]
[--expires-days N]`: a new API key, printed once (only its hash is stored).
`claw apikey revoke --tenant <slug> <prefix>` revokes one."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("apikey", help="create or revoke API keys")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    create = verbs.add_parser("create", help="create a key and print it once")
    create.add_argument("--tenant", required=True, help="tenant slug")
    create.add_argument("--name", required=True, help="what the key is for")
    create.add_argument(
        "--scope",
        action="append",
        choices=["read", "write", "admin"],
        help="repeatable; default: write (which includes read)",
    )
    create.add_argument(
        "--expires-days", type=int, default=None, help="days until it expires (default: never)"
    )
    revoke = verbs.add_parser("revoke", help="revoke a key by its prefix")
    revoke.add_argument("--tenant", required=True, help="tenant slug")
    revoke.add_argument("prefix", help="the 12 characters after claw_ in the key")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from claw_platform.cli.environment import prepare_environment

    database = prepare_environment()
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
        return _create(args) if args.verb == "create" else _revoke(args)
    finally:
        if database is not None and database.started_here:
            database.stop()


def _tenant(slug: str) -> Any:
    from claw_platform.tenancy.models import Tenant

    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        print(f"claw apikey: no tenant with slug {slug!r}", file=sys.stderr)
    return tenant


def _create(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from django.utils import timezone

    from claw_platform.api.actions.keys import do_create_api_key

    tenant = _tenant(args.tenant)
    if tenant is None:
        return 1
    if args.expires_days is not None and args.expires_days < 1:
        print("claw apikey: --expires-days must be at least 1", file=sys.stderr)
        return 2
    expires = timezone.now() + timedelta(days=args.expires_days) if args.expires_days else None
    try:
        api_key, plaintext = do_create_api_key(
            tenant,
            name=args.name,
            scopes=args.scope or ["write"],
            expires_at=expires,
            source="cli",
            acting_user="claw apikey",
        )
    except ValueError as exc:
        print(f"claw apikey: {exc}", file=sys.stderr)
        return 2
    print(plaintext)
    print(
        f"API key {api_key.name!r} for tenant {tenant.slug} (scopes: {', '.join(api_key.scopes)}"
        f"{', expires ' + api_key.expires_at.isoformat() if api_key.expires_at else ''}). "
        "It is shown only now; send it as 'Authorization: Bearer <key>'.",
        file=sys.stderr,
    )
    return 0


def _revoke(args: argparse.Namespace) -> int:
    from claw_platform.api.actions.keys import do_revoke_api_key
    from claw_platform.api.models import ApiKey

    tenant = _tenant(args.tenant)
    if tenant is None:
        return 1
    prefix = args.prefix.removeprefix("claw_").split("_")[0]
    api_key = ApiKey.objects.unscoped().filter(tenant=tenant, prefix=prefix).first()
    if api_key is None:
        print(f"claw apikey: no key with prefix {prefix!r} in {tenant.slug}", file=sys.stderr)
        return 1
    do_revoke_api_key(api_key, acting_user="claw apikey")
    print(f"revoked {api_key}")
    return 0
