"""Tenants, memberships and the base of every tenant-owned model."""

from __future__ import annotations

from typing import Any, ClassVar

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from claw_platform.tenancy.context import current_tenant_id, tenant_context
from claw_platform.tenancy.managers import TenantManager


class Tenant(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    is_active = models.BooleanField(default=True)
    # Audit events older than this are pruned (claw_platform/audit/retention.py); the
    # audit table's trigger allows no other delete.
    audit_retention_days = models.PositiveIntegerField(
        default=365,
        db_default=365,
        validators=[MinValueValidator(1)],
        help_text="Audit events older than this many days are deleted by the daily prune.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class TenantOwned(models.Model):
    """Base of every tenant-owned row. ``objects`` is scoped; ``_base_manager`` is not."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", editable=False)

    objects: ClassVar[TenantManager] = TenantManager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.tenant_id is None:
            tenant_id = current_tenant_id()
            if tenant_id is None:
                raise ValidationError("A tenant-owned object needs a tenant.")
            self.tenant_id = tenant_id
        super().save(*args, **kwargs)

    def validate_constraints(self, exclude: Any = None) -> None:
        """Check ``(tenant, ...)`` unique constraints although forms never carry the
        tenant field, and report a violation on the field the user typed."""
        if self.tenant_id is None:
            super().validate_constraints(exclude=exclude)
            return
        if exclude:
            exclude = set(exclude) - {"tenant"}
        try:
            # Uniqueness is a question about this object's own tenant, whoever asks.
            with tenant_context(self.tenant_id):
                super().validate_constraints(exclude=exclude)
        except ValidationError as exc:
            raise _name_tenant_unique_fields(self, exc) from None

    def validate_unique(self, exclude: Any = None) -> None:
        if self.tenant_id is None:
            super().validate_unique(exclude=exclude)
            return
        with tenant_context(self.tenant_id):
            super().validate_unique(exclude=exclude)


def _name_tenant_unique_fields(instance: models.Model, exc: ValidationError) -> ValidationError:
    if not hasattr(exc, "error_dict"):
        return exc
    errors: dict[str, list[Any]] = {}
    for field, items in exc.error_dict.items():
        for error in items:
            check = (error.params or {}).get("unique_check") if error.code == "unique_together" else None
            named = [f for f in (check or ()) if f != "tenant"]
            if field == "__all__" and named:
                target = named[-1]
                label = getattr(instance._meta.get_field(target), "verbose_name", target)
                message = f"{str(instance._meta.verbose_name).capitalize()} with this {label} already exists"
                if len(named) > 1:
                    message += " (for the same " + ", ".join(named[:-1]) + ")"
                errors.setdefault(target, []).append(ValidationError(message + ".", code="unique"))
            else:
                errors.setdefault(field, []).append(error)
    return ValidationError(errors)


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


# Roles that may change the tenant's configuration in the admin.
CONFIG_EDITOR_ROLES = frozenset({Role.OWNER, Role.ADMIN})


class Membership(TenantOwned):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "user"], name="membership_unique_user")]
        ordering = ["tenant_id", "user_id"]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant_id} ({self.role})"

    @property
    def can_edit_config(self) -> bool:
        return self.role in CONFIG_EDITOR_ROLES
