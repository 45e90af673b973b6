"""Agent teams (G5) and model routing rules (E22), configured per agent in the admin.

An :class:`AgentDelegation` lets one agent consult another (a child run of the other
agent, its answer returned as a tool result) or hand the conversation over to it
(the session continues with the other agent). A :class:`RoutingRule` picks a model
for a message by its length, keywords and patterns, before each turn.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator
from django.db import models

from claw_platform.tenancy.models import TenantOwned


class DelegationMode(models.TextChoices):
    CONSULT = "consult", "Consult (ask and get the answer back)"
    HANDOFF = "handoff", "Hand off (the other agent takes over the chat)"
    BOTH = "both", "Consult or hand off"


class AgentDelegation(TenantOwned):
    """One agent another may consult or hand off to (DELEGATION.md, G5)."""

    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="delegations")
    target = models.ForeignKey(
        "agents.Agent",
        on_delete=models.CASCADE,
        related_name="+",
        help_text="The agent this one may consult or hand off to (same tenant).",
    )
    mode = models.CharField(max_length=16, choices=DelegationMode.choices, default=DelegationMode.BOTH)
    description = models.TextField(
        blank=True,
        validators=[MaxLengthValidator(2_000)],
        help_text="When to use this agent: shown to the model in its delegation list.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "target"], name="agentdelegation_unique_target")
        ]

    def __str__(self) -> str:
        return f"{self.agent_id} -> {self.target_id} ({self.mode})"

    @property
    def allows_consult(self) -> bool:
        return self.mode in (DelegationMode.CONSULT, DelegationMode.BOTH)

    @property
    def allows_handoff(self) -> bool:
        return self.mode in (DelegationMode.HANDOFF, DelegationMode.BOTH)

    def clean(self) -> None:
        if not (self.agent_id and self.target_id):
            return
        if self.agent_id == self.target_id:
            raise ValidationError({"target": "An agent cannot delegate to itself."})
        agent_tenant = (
            type(self.agent)._base_manager.filter(pk=self.agent_id).values_list("tenant_id", flat=True)
        )
        target_tenant = (
            type(self.agent)._base_manager.filter(pk=self.target_id).values_list("tenant_id", flat=True)
        )
        if list(agent_tenant) != list(target_tenant):
            raise ValidationError({"target": "This agent belongs to another tenant."})

    def save(self, *args: object, **kwargs: object) -> None:
        if self.tenant_id is None and self.agent_id:
            self.tenant_id = self.agent.tenant_id
        super().save(*args, **kwargs)  # type: ignore[arg-type]


class RoutingRule(TenantOwned):
    """One classification rule of an agent's model routing (E22, ZeroClaw).

    Rules are tried by descending priority; a rule matches when the message's length
    is within bounds and any keyword (case-insensitive) or pattern (case-sensitive
    substring) occurs in it; a rule with neither matches on length alone.
    """

    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="routing_rules")
    name = models.CharField(max_length=100, help_text="A label, recorded on the runs this rule routes.")
    channel = models.CharField(
        max_length=32,
        blank=True,
        help_text="Only for messages from this channel (web, api, webhook, ...); empty: every channel.",
    )
    priority = models.IntegerField(default=0, help_text="Higher first.")
    min_length = models.PositiveIntegerField(null=True, blank=True, help_text="Characters, at least.")
    max_length = models.PositiveIntegerField(null=True, blank=True, help_text="Characters, at most.")
    keywords = models.TextField(
        blank=True,
        validators=[MaxLengthValidator(4_000)],
        help_text="One per line or comma-separated; any of them (any case) matches.",
    )
    patterns = models.TextField(
        blank=True,
        validators=[MaxLengthValidator(4_000)],
        help_text="One per line; any of them occurring exactly (case-sensitive) matches.",
    )
    model = models.ForeignKey(
        "agents.ModelProfile", on_delete=models.PROTECT, related_name="+", help_text="The model to use."
    )
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["agent_id", "-priority", "id"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors = {}
        if self.min_length is not None and self.max_length is not None and self.min_length > self.max_length:
            errors["max_length"] = "The maximum length is below the minimum."
        if self.model_id and self.agent_id:
            model_tenant = self.model.tenant_id
            if model_tenant != self.agent.tenant_id:
                errors["model"] = "This model belongs to another tenant."
        if errors:
            raise ValidationError(errors)

    def save(self, *args: object, **kwargs: object) -> None:
        if self.tenant_id is None and self.agent_id:
            self.tenant_id = self.agent.tenant_id
        super().save(*args, **kwargs)  # type: ignore[arg-type]
