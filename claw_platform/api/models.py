"""API keys (A1), pairing codes (A5), per-agent webhook settings and idempotency
records (A4). Only hashes of keys and codes are stored; secrets are encrypted."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from claw_platform.crypto import DigestField, EncryptedTextField
from claw_platform.tenancy.models import TenantOwned


class Scope(models.TextChoices):
    READ = "read", "Read"
    WRITE = "write", "Write (sessions, messages, runs, approvals)"
    ADMIN = "admin", "Admin (agents, providers, models, keys, audit)"


# A scope grants the ones below it.
IMPLIED_SCOPES = {
    Scope.READ: frozenset({Scope.READ}),
    Scope.WRITE: frozenset({Scope.READ, Scope.WRITE}),
    Scope.ADMIN: frozenset({Scope.READ, Scope.WRITE, Scope.ADMIN}),
}


def granted_scopes(scopes: list[str]) -> frozenset[str]:
    granted: set[str] = set()
    for scope in scopes:
        granted |= IMPLIED_SCOPES.get(Scope(scope), frozenset()) if scope in Scope.values else set()
    return frozenset(granted)


class ApiKey(TenantOwned):
    """A tenant's API key. The key is ``claw_<prefix>_<secret>``; the prefix finds the
    row, the SHA-256 of the whole key proves it (keys are 190-bit random, so a fast
    hash is safe; a slow password hash would cost every request)."""

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    key_hash = DigestField(max_length=64, editable=False)
    scopes = models.JSONField(default=list, help_text="Any of read, write, admin.")
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires.")
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    # A key acts as this member, with their current role, and goes with them; keys
    # without one were made by the operator and act for the whole tenant.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        help_text="The member the key acts as; empty: made by the operator, acts for the tenant.",
    )
    source = models.CharField(max_length=16, default="admin", editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    AUDIT_EXCLUDE = frozenset({"last_used_at", "key_hash"})

    class Meta:
        verbose_name = "API key"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} (claw_{self.prefix}_…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > timezone.now())


class PairingCode(TenantOwned):
    """A one-time code an admin issues; a device exchanges it for an API key (A5)."""

    name = models.CharField(max_length=100, help_text="Name of the key the device will get.")
    code_hash = DigestField(max_length=64, unique=True, editable=False)
    scopes = models.JSONField(default=list)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True, editable=False)
    api_key = models.ForeignKey(ApiKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    # The key it makes acts as this member (empty: the operator's, for the tenant).
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    AUDIT_EXCLUDE = frozenset({"code_hash"})

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"pairing code for {self.name}"


class WebhookMode(models.TextChoices):
    SYNC = "sync", "Answer with the reply (waits for the run)"
    ASYNC = "async", "Answer 202 with the run at once"


class AgentWebhook(TenantOwned):
    """Inbound webhook settings of one agent (A4). Without a row the agent's hook
    accepts bearer-authenticated calls, unsigned, answered synchronously."""

    agent = models.OneToOneField("agents.Agent", on_delete=models.CASCADE, related_name="webhook")
    enabled = models.BooleanField(default=True)
    signing_secret = EncryptedTextField(
        blank=True, help_text="HMAC-SHA256 secret; when set, every call must be signed."
    )
    tolerance_seconds = models.PositiveIntegerField(
        default=300,
        validators=[MinValueValidator(1), MaxValueValidator(3600)],
        help_text="Signed calls older or newer than this are refused as replays.",
    )
    mode = models.CharField(max_length=8, choices=WebhookMode.choices, default=WebhookMode.SYNC)
    rate_per_minute = models.PositiveIntegerField(
        default=60, validators=[MinValueValidator(1), MaxValueValidator(100_000)]
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"webhook of agent {self.agent_id}"


class IdempotencyRecord(TenantOwned):
    """The first response to a request carrying an ``Idempotency-Key`` (A4). Its
    outcome follows the run it started, not the first caller's connection: a repeat
    reads the run (``claw_platform.api.views.hooks``) while ``status_code`` is unset."""

    MEMBER_OWNER = "run__session__user"  # whose run: the member rule (tenancy.member_rule)

    scope = models.CharField(max_length=120, help_text="Where the key applies, e.g. hook:<agent id>.")
    key = models.CharField(max_length=200)
    request_hash = models.CharField(max_length=64)
    run = models.ForeignKey(
        "agents.Run",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The run the first request started.",
    )
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "scope", "key"], name="idempotency_unique_key")
        ]

    def __str__(self) -> str:
        return f"{self.scope} {self.key}"
