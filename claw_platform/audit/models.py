"""The append-only audit trail (O3, Z3)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from claw_platform.tenancy.managers import TenantManager, TenantQuerySet
from claw_platform.tenancy.models import Tenant


class AuditImmutable(Exception):
    """Audit rows are written once and never changed or deleted."""


class AuditQuerySet(TenantQuerySet):
    def update(self, **kwargs: Any) -> int:
        raise AuditImmutable("audit events cannot be updated")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AuditImmutable("audit events cannot be deleted")


class AuditManager(TenantManager):
    _queryset_class = AuditQuerySet


class AuditEvent(models.Model):
    # Nullable: sign-ins and platform events may belong to no tenant. A database
    # trigger (migration 0002) refuses UPDATE and DELETE as a second wall.
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        db_constraint=False,
    )
    actor_label = models.CharField(max_length=200, blank=True)
    action = models.CharField(max_length=64, db_index=True)
    object_type = models.CharField(max_length=100, blank=True, db_index=True)
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=300, blank=True)
    diff = models.JSONField(default=dict, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = AuditManager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant", "-created_at"], name="audit_tenant_time")]

    def __str__(self) -> str:
        return f"{self.action} {self.object_type}:{self.object_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise AuditImmutable("audit events cannot be updated")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AuditImmutable("audit events cannot be deleted")
