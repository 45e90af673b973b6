"""Per-agent tool configuration (T1, T12, T15, X2): which tools an agent offers, how
their calls are approved, where its shell runs, and its workspace limits.

- :class:`AgentToolConfig` -- one per agent (created on first save in the admin;
  absent means the defaults): allow/deny lists, the agent's approval mode and the
  risk from which calls need approval, shell and workspace settings.
- :class:`ToolSetting` -- per tool (exact name or shell-style pattern) of an agent:
  approval mode, risk override and, for shell tools, host / sandbox / either.

Only people reach these rows (admin, actions); no tool reads or writes them except
to build a run's executor (item 9 of the tools issue: an agent cannot change its own
tools or approvals). The operator's settings cap the shell choices
(:mod:`tools_app.sandbox.operator`): ``clean`` refuses host execution and shell
network the operator does not allow, and the run caps rows saved before.
"""

from __future__ import annotations

import fnmatch
import re

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from claw_platform.tenancy.models import TenantOwned
from tools_app.sandbox.operator import (
    HOST_REFUSED,
    NETWORK_REFUSED,
    host_shell_allowed,
    shell_network_allowed,
)

# A tool name as providers accept it, or a shell-style pattern over such names.
_ENTRY_RE = re.compile(r"^[A-Za-z0-9_\-*?\[\]!]{1,64}$")


class ApprovalMode(models.TextChoices):
    AUTO = "auto", "Auto: run without asking"
    ASK = "ask", "Ask: a person approves calls at or above the approval risk"
    DENY = "deny", "Deny: refuse calls at or above the approval risk (nobody to ask)"
    READ_ONLY = "read_only", "Read-only: only tools (and shell commands) that change nothing"


class ToolApprovalMode(models.TextChoices):
    INHERIT = "", "As the agent"
    AUTO = "auto", "Auto: never ask"
    ASK = "ask", "Ask: every call needs a person's approval"
    DENY = "deny", "Deny: never offered, refused if called"
    READ_ONLY = "read_only", "Read-only: only calls that change nothing"


class Risk(models.TextChoices):
    LOW = "low", "Low"
    MEDIUM = "medium", "Medium"
    HIGH = "high", "High"


class ShellExecution(models.TextChoices):
    INHERIT = "", "Default (either)"
    HOST = "host", "Host (only where the operator allows it: weaker than the sandbox)"
    SANDBOX = "sandbox", "Sandbox only (bubblewrap; refused where unavailable)"
    EITHER = "either", "Sandbox where available, else host where the operator allows it"


def parse_name_list(text: str) -> list[str]:
    """Entries of an allow/deny list: one per line or comma-separated."""
    return [e.strip() for e in re.split(r"[\n,]+", text or "") if e.strip()]


def validate_name_list(text: str) -> None:
    bad = [e for e in parse_name_list(text) if not _ENTRY_RE.match(e)]
    if bad:
        raise ValidationError(
            f"Not a tool name or pattern: {', '.join(bad[:5])}. Use names such as bash or "
            "patterns such as mcp_github_*."
        )


class AgentToolConfig(TenantOwned):
    agent = models.OneToOneField("agents.Agent", on_delete=models.CASCADE, related_name="tool_config")
    allowed_tools = models.TextField(
        blank=True,
        validators=[validate_name_list],
        help_text="Tools this agent offers (names or patterns such as mcp_github_*), one per line. "
        "Empty: every tool.",
    )
    denied_tools = models.TextField(
        blank=True,
        validators=[validate_name_list],
        help_text="Tools never offered (names or patterns); the deny list wins over the allow list.",
    )
    approval_mode = models.CharField(max_length=16, choices=ApprovalMode.choices, default=ApprovalMode.ASK)
    approval_risk = models.CharField(
        max_length=8,
        choices=Risk.choices,
        default=Risk.HIGH,
        help_text="Calls of this risk or higher are asked about (mode ask) or refused (mode deny).",
    )
    shell_timeout_seconds = models.PositiveIntegerField(
        default=60, validators=[MinValueValidator(1), MaxValueValidator(600)]
    )
    shell_network = models.BooleanField(
        default=False,
        help_text="Let sandboxed shell commands reach the network (outbound only, never this "
        "server's own services), where the operator allows it (CLAW_SHELL_NETWORK).",
    )
    max_file_bytes = models.PositiveIntegerField(
        default=1_000_000,
        validators=[MinValueValidator(1_000), MaxValueValidator(50_000_000)],
        help_text="Largest file read_file, write_file and edit_file handle.",
    )
    workspace_quota_mb = models.PositiveIntegerField(
        default=500,
        validators=[MinValueValidator(1), MaxValueValidator(100_000)],
        help_text="Largest file a shell command may write (a per-process limit), in MB.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "tool configuration"

    def __str__(self) -> str:
        return f"Tools of agent {self.agent_id}"

    def clean(self) -> None:
        if self.shell_network and not shell_network_allowed():
            raise ValidationError({"shell_network": NETWORK_REFUSED})

    def save(self, *args: object, **kwargs: object) -> None:
        if self.tenant_id is None and self.agent_id:
            self.tenant_id = self.agent.tenant_id
        super().save(*args, **kwargs)  # type: ignore[arg-type]


class ToolSetting(TenantOwned):
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="tool_settings")
    tool = models.CharField(
        max_length=64, help_text="A tool name (bash) or a pattern (mcp_github_*); an exact name wins."
    )
    approval_mode = models.CharField(
        max_length=16, choices=ToolApprovalMode.choices, default=ToolApprovalMode.INHERIT, blank=True
    )
    risk = models.CharField(
        max_length=8, choices=Risk.choices, blank=True, help_text="Override the tool's own risk level."
    )
    execution = models.CharField(
        max_length=8,
        choices=ShellExecution.choices,
        blank=True,
        default=ShellExecution.INHERIT,
        help_text="Shell tools only: where commands run (on the host only where the operator "
        "allows it: CLAW_SHELL_HOST).",
    )

    class Meta:
        ordering = ["agent_id", "tool"]
        constraints = [models.UniqueConstraint(fields=["agent", "tool"], name="toolsetting_unique_tool")]

    def __str__(self) -> str:
        return self.tool

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if not _ENTRY_RE.match(self.tool or ""):
            errors["tool"] = "Use a tool name such as bash, or a pattern such as mcp_github_*."
        if self.execution == ShellExecution.HOST and not host_shell_allowed():
            errors["execution"] = HOST_REFUSED
        if errors:
            raise ValidationError(errors)

    def matches(self, name: str) -> bool:
        return self.tool == name or fnmatch.fnmatchcase(name, self.tool)

    def save(self, *args: object, **kwargs: object) -> None:
        if self.tenant_id is None and self.agent_id:
            self.tenant_id = self.agent.tenant_id
        super().save(*args, **kwargs)  # type: ignore[arg-type]
