"""Hooks (H1-H3): admin-configured code run at six points of every run."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, URLValidator
from django.db import models

from claw_platform.crypto import EncryptedTextField
from claw_platform.tenancy.models import TenantOwned
from tools_app.models._common import agents_field

MIN_TIMEOUT_MS = 10
MAX_TIMEOUT_MS = 120_000


class HookEvent(models.TextChoices):
    ON_MESSAGE_RECEIVED = "on_message_received", "Message received (may patch text or drop it)"
    BEFORE_LLM_CALL = "before_llm_call", "Before each LLM call (may patch system prompt or model)"
    BEFORE_TOOL_CALL = "before_tool_call", "Before each tool call (may patch arguments or block)"
    AFTER_TOOL_CALL = "after_tool_call", "After each tool call (may patch the result or block it)"
    ON_MESSAGE_SENDING = "on_message_sending", "Before a reply is delivered (may patch text or suppress it)"
    RUN_FINISHED = "run_finished", "Run finished (observe only)"


class HookKind(models.TextChoices):
    SHELL = "shell", "Shell command (JSON on stdin and stdout)"
    WEBHOOK = "webhook", "HTTP webhook (signed with HMAC-SHA256)"
    PYTHON = "python", "Python callable registered by the operator"


class HookOnError(models.TextChoices):
    BLOCK = "block", "Block (fail closed)"
    ALLOW = "allow", "Allow (fail open)"


class Hook(TenantOwned):
    """One hook. Hooks of an event run in ``priority`` order (lower first); each
    answers allow, modify (patches) or block. A hook that fails -- error, bad
    output, timeout -- is treated as ``on_error`` says; the default blocks."""

    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    event = models.CharField(max_length=32, choices=HookEvent.choices)
    kind = models.CharField(max_length=16, choices=HookKind.choices)
    enabled = models.BooleanField(default=True)
    priority = models.IntegerField(default=100, help_text="Lower runs first.")
    on_error = models.CharField(
        max_length=8,
        choices=HookOnError.choices,
        default=HookOnError.BLOCK,
        help_text="What an error, bad output or timeout of this hook means.",
    )
    timeout_ms = models.PositiveIntegerField(
        default=5_000,
        validators=[MinValueValidator(MIN_TIMEOUT_MS), MaxValueValidator(MAX_TIMEOUT_MS)],
        help_text="Milliseconds, 10 to 120,000.",
    )
    agents = agents_field()
    command = models.TextField(
        blank=True,
        help_text="Shell command (kind shell): gets the event as JSON on stdin and the event "
        "name in CLAW_HOOK_EVENT; prints a JSON answer such as "
        '{"action": "block", "reason": "..."} (nothing printed means allow).',
    )
    url = models.CharField(
        max_length=500,
        blank=True,
        validators=[URLValidator(schemes=["http", "https"])],
        help_text="Webhook URL (kind webhook): receives the event as a JSON POST and answers like a shell hook.",
    )
    secret = EncryptedTextField(
        blank=True,
        help_text="Webhook signing secret: X-Claw-Signature is sha256=HMAC(secret, timestamp + '.' + body). "
        "Stored encrypted.",
    )
    callable = models.CharField(
        max_length=200,
        blank=True,
        help_text="Python callable (kind python), one of those the operator registered.",
    )
    config = models.JSONField(
        default=dict,
        blank=True,
        help_text='Options for a Python hook, e.g. {"tools": ["bash"]}.',
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["event", "priority", "name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="hook_unique_name")]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        from tools_app.hooks.callables import registered_callables

        errors: dict[str, str] = {}
        if self.kind == HookKind.SHELL:
            if not self.command.strip():
                errors["command"] = "A shell hook needs a command."
            elif not settings.CLAW_HOOKS_SHELL:
                errors["kind"] = (
                    "Shell hooks are turned off on this installation (CLAW_HOOKS_SHELL); "
                    "use a webhook or a registered Python hook."
                )
        elif self.kind == HookKind.WEBHOOK:
            if not self.url:
                errors["url"] = "A webhook hook needs a URL."
            if not self.secret:
                errors["secret"] = "A webhook hook needs a signing secret, so the receiver can verify calls."
        elif self.kind == HookKind.PYTHON and self.callable not in registered_callables():
            errors["callable"] = "Choose one of the Python hooks the operator registered."
        if not isinstance(self.config, dict):
            errors["config"] = "Must be a JSON object."
        if errors:
            raise ValidationError(errors)
