"""Creating a tenant's extensions outside the admin (setup, tests, provisioning).

Each ``do_create_*`` validates the row like the admin does (``full_clean``), saves it,
sets the agents it applies to, and writes its audit row in the same transaction.
Secrets given here (headers, environment, webhook secret) are stored encrypted and
masked in the audit row.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import models, transaction

from agents.models import Agent
from claw_platform.audit.actions import record_audit_event, snapshot
from claw_platform.tenancy.context import tenant_context
from claw_platform.tenancy.models import Tenant
from tools_app.models import AllowedHost, Hook, HttpTool, McpServer, Skill


def _create(
    model: type[models.Model],
    tenant: Tenant,
    *,
    acting_user: Any,
    agents: Iterable[Agent] = (),
    **fields: Any,
) -> Any:
    chosen = list(agents)
    if any(a.tenant_id != tenant.pk for a in chosen):
        raise ValueError("an extension can only apply to agents of its own tenant")
    obj: Any = model(tenant=tenant, **fields)
    obj.full_clean()
    obj.save()
    if chosen:
        with tenant_context(tenant.pk):
            obj.agents.set(chosen)
    record_audit_event(
        action=f"{model._meta.model_name}.created",
        actor=acting_user,
        obj=obj,
        diff={k: [None, v] for k, v in snapshot(obj).items()},
    )
    return obj


def _secret_map(value: Mapping[str, str] | None) -> str:
    return json.dumps(dict(value)) if value else ""


@transaction.atomic
def do_create_hook(
    tenant: Tenant, *, acting_user: Any = None, agents: Iterable[Agent] = (), **fields: Any
) -> Hook:
    return _create(Hook, tenant, acting_user=acting_user, agents=agents, **fields)  # type: ignore[no-any-return]


@transaction.atomic
def do_create_mcp_server(
    tenant: Tenant,
    *,
    acting_user: Any = None,
    agents: Iterable[Agent] = (),
    env: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    **fields: Any,
) -> McpServer:
    return _create(  # type: ignore[no-any-return]
        McpServer,
        tenant,
        acting_user=acting_user,
        agents=agents,
        env=_secret_map(env),
        headers=_secret_map(headers),
        **fields,
    )


@transaction.atomic
def do_create_http_tool(
    tenant: Tenant,
    *,
    acting_user: Any = None,
    agents: Iterable[Agent] = (),
    headers: Mapping[str, str] | None = None,
    **fields: Any,
) -> HttpTool:
    return _create(  # type: ignore[no-any-return]
        HttpTool, tenant, acting_user=acting_user, agents=agents, headers=_secret_map(headers), **fields
    )


@transaction.atomic
def do_create_skill(
    tenant: Tenant, *, acting_user: Any = None, agents: Iterable[Agent] = (), **fields: Any
) -> Skill:
    return _create(Skill, tenant, acting_user=acting_user, agents=agents, **fields)  # type: ignore[no-any-return]


@transaction.atomic
def do_allow_host(
    tenant: Tenant, pattern: str, *, port: int | None = None, note: str = "", acting_user: Any = None
) -> AllowedHost:
    return _create(  # type: ignore[no-any-return]
        AllowedHost, tenant, acting_user=acting_user, pattern=pattern, port=port, note=note
    )
