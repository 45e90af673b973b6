"""Creating and revoking API keys (A1), and pairing devices (A5)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from claw_platform.api.key_cache import forget_key
from claw_platform.api.models import ApiKey, PairingCode, Scope
from claw_platform.api.secrets import new_api_key, new_pairing_code, normalise_pairing_code, sha256_hex
from claw_platform.audit.actions import record_audit_event
from claw_platform.tenancy.context import tenant_context
from claw_platform.tenancy.models import Tenant
from claw_platform.tenancy.rls import system_bypass

PAIRING_CODE_TTL = timedelta(minutes=10)
_ACTING_USER: Any = object()


def check_scopes(scopes: list[str]) -> list[str]:
    unknown = [s for s in scopes if s not in Scope.values]
    if unknown:
        raise ValueError(f"Unknown scope {unknown[0]!r}; use read, write or admin.")
    if not scopes:
        raise ValueError("A key needs at least one scope: read, write or admin.")
    return sorted(set(scopes), key=Scope.values.index)


@transaction.atomic
def do_create_api_key(
    tenant: Tenant,
    *,
    name: str,
    scopes: list[str],
    expires_at: datetime | None = None,
    created_by: Any = None,
    source: str = "admin",
    acting_user: Any,
    ip: str | None = None,
) -> tuple[ApiKey, str]:
    """A new key; returns it with the plaintext, which is never stored nor shown again."""
    name = name.strip()
    if not name:
        raise ValueError("A key needs a name.")
    prefix, plaintext = new_api_key()
    api_key = ApiKey._base_manager.create(
        tenant=tenant,
        name=name[:100],
        prefix=prefix,
        key_hash=sha256_hex(plaintext),
        scopes=check_scopes(scopes),
        expires_at=expires_at,
        created_by=created_by if getattr(created_by, "pk", None) else None,
        source=source,
    )
    record_audit_event(
        action="apikey.created",
        actor=acting_user,
        obj=api_key,
        diff={"name": [None, api_key.name], "scopes": [None, api_key.scopes], "source": [None, source]},
        ip=ip,
    )
    return api_key, plaintext


@transaction.atomic
def do_revoke_api_key(api_key: ApiKey, *, acting_user: Any, ip: str | None = None) -> ApiKey:
    if api_key.revoked_at is None:
        api_key.revoked_at = timezone.now()
        ApiKey._base_manager.filter(pk=api_key.pk).update(revoked_at=api_key.revoked_at)
        forget_key(api_key.prefix)
        record_audit_event(
            action="apikey.revoked", actor=acting_user, obj=api_key, diff={"revoked": [False, True]}, ip=ip
        )
    return api_key


@transaction.atomic
def do_issue_pairing_code(
    tenant: Tenant,
    *,
    name: str,
    scopes: list[str],
    acting_user: Any,
    created_by: Any = _ACTING_USER,
    ttl: timedelta = PAIRING_CODE_TTL,
    ip: str | None = None,
) -> tuple[PairingCode, str]:
    """A one-time code, valid for ``ttl``; returns it with the plaintext code. The key
    it makes acts as ``created_by`` (default: ``acting_user``; None or an API key's
    actor without a person: the operator's, for the whole tenant)."""
    if created_by is _ACTING_USER:
        created_by = acting_user
    name = name.strip()
    if not name:
        raise ValueError("A pairing code needs the name of the key it will make.")
    code = new_pairing_code()
    pairing = PairingCode._base_manager.create(
        tenant=tenant,
        name=name[:100],
        code_hash=sha256_hex(normalise_pairing_code(code)),
        scopes=check_scopes(scopes),
        expires_at=timezone.now() + ttl,
        created_by=created_by if getattr(created_by, "pk", None) else None,
    )
    record_audit_event(
        action="pairingcode.issued",
        actor=acting_user,
        obj=pairing,
        diff={"name": [None, pairing.name], "scopes": [None, pairing.scopes]},
        ip=ip,
    )
    return pairing, code


class InvalidPairingCode(Exception):
    """No unused, unexpired code matches (the caller counts it as a failure)."""


@transaction.atomic
def do_pair_device(code: str, *, ip: str | None = None) -> tuple[ApiKey, str]:
    """Exchange a one-time code for a new key. The code's row lock makes a code that
    two devices send at once pair only one of them."""
    with system_bypass():  # pairing code -> tenant: the code is what says which tenant
        pairing = (
            PairingCode._base_manager.select_for_update()
            .select_related("tenant")
            .filter(
                code_hash=sha256_hex(normalise_pairing_code(code)),
                used_at__isnull=True,
                expires_at__gt=timezone.now(),
                tenant__is_active=True,
            )
            .first()
        )
    if pairing is None:
        raise InvalidPairingCode
    with tenant_context(pairing.tenant_id):
        api_key, plaintext = do_create_api_key(
            pairing.tenant,
            name=pairing.name,
            scopes=list(pairing.scopes),
            created_by=pairing.created_by,
            source="pairing",
            acting_user=f"pairing code {pairing.pk}",
            ip=ip,
        )
        PairingCode._base_manager.filter(pk=pairing.pk).update(used_at=timezone.now(), api_key=api_key)
        record_audit_event(
            action="pairingcode.used", actor=f"pairing code {pairing.pk}", obj=pairing, diff={}, ip=ip
        )
    return api_key, plaintext
