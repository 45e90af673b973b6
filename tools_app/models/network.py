"""The tenant's allow-list of internal services the SSRF guard lets through."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from claw_platform.tenancy.models import TenantOwned
from tools_app.guards.ssrf import check_allow_pattern


class AllowedHost(TenantOwned):
    """An internal host or network this tenant's tools, MCP servers, HTTP tools and
    webhooks may reach although its address is not public (loopback, private ...).
    Cloud metadata endpoints can never be allowed."""

    pattern = models.CharField(
        max_length=255,
        help_text="A host name (wiki.corp.example), a wildcard (*.corp.example), an address "
        "(10.1.2.3) or a network (10.1.0.0/16).",
    )
    port = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(65535)],
        help_text="Only this port. Leave empty for any port.",
    )
    note = models.CharField(max_length=200, blank=True, help_text="What the service is, for the next admin.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "allowed internal host"
        ordering = ["pattern", "port"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "pattern", "port"], name="allowedhost_unique", nulls_distinct=False
            )
        ]

    def __str__(self) -> str:
        return self.pattern + (f":{self.port}" if self.port else "")

    def clean(self) -> None:
        try:
            self.pattern = check_allow_pattern(self.pattern or "")
        except ValueError as exc:
            raise ValidationError({"pattern": str(exc)}) from None
