"""The tenant-scoped manager every tenant-owned model uses (PostHog's TeamScopedManager)."""

from __future__ import annotations

from typing import Any

from django.db import models

from claw_platform.tenancy.context import TenantContextMissing, current_tenant_id, is_all_tenants


class TenantQuerySet(models.QuerySet):
    def visible_to(self, caller: Any) -> TenantQuerySet:
        """The rows ``caller`` sees under the member rule
        (:func:`claw_platform.tenancy.member_rule.visible_to`)."""
        from claw_platform.tenancy.member_rule import visible_to

        return visible_to(self, caller)  # type: ignore[return-value]


class TenantManager(models.Manager):
    """Filters every query to the tenant in context; refuses to run without one.

    ``unscoped()`` is the one explicit escape. Related-object managers derive from this
    one, so ``agent.files.all()`` is scoped too; the base manager used for cascades and
    forward foreign keys stays plain (the object was already authorised).
    """

    _queryset_class = TenantQuerySet

    def get_queryset(self) -> TenantQuerySet:  # type: ignore[override]
        qs: TenantQuerySet = super().get_queryset()  # type: ignore[assignment]
        if is_all_tenants():
            return qs
        tenant_id = current_tenant_id()
        if tenant_id is None:
            raise TenantContextMissing(
                f"{self.model.__name__} queried without a tenant in context; wrap the code in "
                "tenant_context(tenant) or use .unscoped() for system code"
            )
        return qs.filter(tenant_id=tenant_id)

    def none(self) -> TenantQuerySet:
        # An empty queryset reveals nothing, so it needs no tenant (schema generators
        # and filters build one to introspect the model).
        return self.unscoped().none()

    def unscoped(self) -> TenantQuerySet:
        return super().get_queryset()  # type: ignore[return-value]

    def visible_to(self, caller: Any) -> TenantQuerySet:
        """The tenant's rows that ``caller`` sees under the member rule."""
        return self.get_queryset().visible_to(caller)

    def create(self, **kwargs: Any) -> Any:
        if "tenant" not in kwargs and "tenant_id" not in kwargs:
            tenant_id = current_tenant_id()
            if tenant_id is None:
                raise TenantContextMissing(f"{self.model.__name__} created without a tenant")
            kwargs["tenant_id"] = tenant_id
        return super().create(**kwargs)
