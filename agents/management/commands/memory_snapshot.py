"""Export an agent's (and a user's) core memories to MEMORY_SNAPSHOT.md, or hydrate
an empty store from one (M4)::

    manage.py memory_snapshot export --tenant acme --agent assistant [--user sam] [--tenant-wide] [--out FILE]
    manage.py memory_snapshot hydrate --tenant acme --agent assistant [--user sam] FILE
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.memory.snapshot import MAX_SNAPSHOT_CHARS, hydrate, snapshot_markdown
from agents.memory.store import MemoryError, MemoryOwner
from agents.models import Agent, MemoryScope
from claw_platform.tenancy.context import tenant_context
from claw_platform.tenancy.models import Tenant


class Command(BaseCommand):
    help = "Export memories to MEMORY_SNAPSHOT.md, or hydrate an empty memory store from one."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["export", "hydrate"])
        parser.add_argument("file", nargs="?", help="hydrate: the snapshot to read")
        parser.add_argument("--tenant", required=True, help="the tenant's slug")
        parser.add_argument("--agent", required=True, help="the agent's slug")
        parser.add_argument("--user", help="a username: their own memories too")
        parser.add_argument("--tenant-wide", action="store_true", help="the tenant's shared memories too")
        parser.add_argument("--out", help="export: write here instead of standard output")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"There is no tenant {options['tenant']!r}.")
        with tenant_context(tenant):
            agent = Agent._base_manager.filter(tenant=tenant, slug=options["agent"]).first()
            if agent is None:
                raise CommandError(f"There is no agent {options['agent']!r} in {tenant.slug}.")
            user_id = None
            if options["user"]:
                user = get_user_model().objects.filter(username=options["user"]).first()
                if user is None:
                    raise CommandError(f"There is no user {options['user']!r}.")
                user_id = user.pk
            owner = MemoryOwner(
                tenant_id=tenant.pk,
                agent_id=agent.pk,
                user_id=user_id,
                may_write_tenant=True,
                actor="operator",
            )
            if options["action"] == "export":
                scopes: list[str] = [MemoryScope.AGENT.value]
                if user_id:
                    scopes.append(MemoryScope.USER.value)
                if options["tenant_wide"]:
                    scopes.append(MemoryScope.TENANT.value)
                text = snapshot_markdown(owner, scopes=scopes)
                if options["out"]:
                    Path(options["out"]).write_text(text, encoding="utf-8")
                else:
                    sys.stdout.write(text)
                return
            if not options["file"]:
                raise CommandError("hydrate needs the snapshot file.")
            with open(options["file"], encoding="utf-8") as handle:
                text = handle.read(MAX_SNAPSHOT_CHARS + 1)
            try:
                count = hydrate(owner, text)
            except MemoryError as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(f"{count} memories written; they are embedded in the background.")
