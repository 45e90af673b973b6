"""Writing audit events. Callers run inside the transaction of the change they record."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import models

from claw_platform.audit.models import AuditEvent
from claw_platform.client_address import client_address
from claw_platform.secret_fields import audit_value, is_secret_field
from claw_platform.tenancy.rls import system_bypass


def snapshot(instance: models.Model) -> dict[str, Any]:
    """Field values of a model instance, JSON-safe; a secret only as set or not
    (with a fingerprint, so replacing it is a change)."""
    data: dict[str, Any] = {}
    excluded: frozenset[str] = getattr(instance, "AUDIT_EXCLUDE", frozenset())
    for field in instance._meta.concrete_fields:
        if getattr(field, "auto_now", False) or field.name in excluded:
            continue  # bookkeeping, not a change anyone made
        if is_secret_field(field):
            data[field.name] = audit_value(field.value_from_object(instance))
            continue
        data[field.attname if field.is_relation else field.name] = field_json_value(field, instance)
    return data


def field_json_value(field: Any, instance: models.Model) -> Any:
    """A field's value as JSON, stable between a form-cleaned and a loaded instance."""
    value = field.value_from_object(instance)
    if value is None or isinstance(value, bool | int | float | str | dict | list):
        return value
    if isinstance(value, Decimal) and getattr(field, "decimal_places", None) is not None:
        return str(value.quantize(Decimal(1).scaleb(-field.decimal_places)))
    return str(value)


def diff_snapshots(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    """``{field: [old, new]}`` for every field that differs."""
    before = before or {}
    after = after or {}
    changes: dict[str, Any] = {}
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old != new:
            changes[key] = [old, new]
    return changes


def record_audit_event(
    *,
    action: str,
    actor: Any = None,
    tenant_id: int | None = None,
    obj: models.Model | None = None,
    diff: dict[str, Any] | None = None,
    ip: str | None = None,
    object_type: str = "",
    object_id: str = "",
    object_repr: str = "",
) -> AuditEvent:
    if obj is not None:
        object_type = object_type or obj._meta.label_lower
        object_id = object_id or str(obj.pk)
        object_repr = object_repr or str(obj)[:300]
        if tenant_id is None:
            tenant_id = getattr(obj, "tenant_id", None)
    actor_obj = actor if getattr(actor, "pk", None) else None
    event = AuditEvent(
        tenant_id=tenant_id,
        actor=actor_obj,
        actor_label=actor_label(actor),
        action=action,
        object_type=object_type,
        object_id=object_id,
        object_repr=object_repr,
        diff=diff or {},
        ip=ip,
    )
    if tenant_id is None:
        with (
            system_bypass()
        ):  # a platform event of no tenant (a failed sign-in): no tenant's policy admits it
            event.save()
    else:
        event.save()
    return event


def actor_label(actor: Any) -> str:
    """How an audit row names its actor: a user's username, else the actor's text
    (an API key, a routine), else "system"."""
    return (actor.get_username() if getattr(actor, "pk", None) else str(actor or "system"))[:200]


def client_ip(request: Any) -> str | None:
    """The client's address (through the trusted proxies of ``CLAW_TRUSTED_PROXIES``)."""
    return client_address(request)
