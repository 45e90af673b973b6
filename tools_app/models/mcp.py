"""MCP servers (T10): a tenant's Model Context Protocol servers, stdio or streamable HTTP."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator, URLValidator
from django.db import models

from claw_platform.tenancy.models import TenantOwned
from tools_app.mcp.commands import CommandRefused, check_arguments, check_command, check_environment
from tools_app.models._common import (
    agents_field,
    check_header_names,
    check_secret_map,
    load_secret_map,
    secret_map_field,
)
from tools_app.models.user_tokens import PerUserTokenFields

MCP_SERVER_NAME_RE = r"^[a-z0-9][a-z0-9_-]{0,23}$"


class McpTransport(models.TextChoices):
    STDIO = "stdio", "stdio (an operator-approved command)"
    HTTP = "http", "Streamable HTTP"


class McpServer(TenantOwned, PerUserTokenFields):
    """One MCP server. Its tools appear as ``mcp_<name>_<tool>``; calls are limited by
    a timeout, a rate limit, a concurrency cap and a circuit breaker."""

    name = models.CharField(
        max_length=24,
        validators=[RegexValidator(MCP_SERVER_NAME_RE, "Lower-case letters, digits, - and _ (e.g. github).")],
        help_text="Tools are named mcp_<name>_<tool>.",
    )
    description = models.TextField(blank=True)
    transport = models.CharField(max_length=8, choices=McpTransport.choices)
    command = models.CharField(
        max_length=100, blank=True, help_text="stdio: one of the commands the operator approved."
    )
    args = models.JSONField(
        default=list,
        blank=True,
        help_text='stdio: extra arguments, a JSON list of strings, e.g. ["--toolsets", "repos"].',
    )
    env = secret_map_field('stdio: environment variables as a JSON object, e.g. {"GITHUB_TOKEN": "..."}.')
    url = models.CharField(
        max_length=500,
        blank=True,
        validators=[URLValidator(schemes=["http", "https"])],
        help_text="HTTP: the server's streamable HTTP endpoint, e.g. https://mcp.example.com/mcp.",
    )
    headers = secret_map_field(
        'HTTP: request headers as a JSON object, e.g. {"Authorization": "Bearer ..."}.'
    )
    timeout_seconds = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(600)], help_text="Per call."
    )
    rate_limit_per_minute = models.PositiveIntegerField(
        default=60, validators=[MaxValueValidator(100_000)], help_text="Calls per minute; 0 for no limit."
    )
    max_concurrency = models.PositiveIntegerField(
        default=4,
        validators=[MinValueValidator(1), MaxValueValidator(64)],
        help_text="Calls in flight at once.",
    )
    circuit_failure_threshold = models.PositiveIntegerField(
        default=5,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Consecutive failures that open the circuit.",
    )
    circuit_cooldown_seconds = models.PositiveIntegerField(
        default=30,
        validators=[MinValueValidator(1), MaxValueValidator(3600)],
        help_text="How long an open circuit refuses calls before one trial call.",
    )
    enabled = models.BooleanField(default=True)
    agents = agents_field()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "MCP server"
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="mcpserver_unique_name")]

    def __str__(self) -> str:
        return self.name

    def env_map(self) -> dict[str, str]:
        return load_secret_map(self.env)

    def header_map(self) -> dict[str, str]:
        return load_secret_map(self.headers)

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.transport == McpTransport.STDIO:
            try:
                check_command(self.command, settings.CLAW_MCP_STDIO_COMMANDS)
            except CommandRefused as exc:
                errors["command"] = str(exc)
            try:
                check_arguments(self.args)
            except CommandRefused as exc:
                errors["args"] = str(exc)
            try:
                check_environment(check_secret_map(self.env, what="Environment"))
            except (CommandRefused, ValidationError) as exc:
                errors["env"] = exc.messages[0] if isinstance(exc, ValidationError) else str(exc)
            if self.url or self.headers:
                errors["url"] = "A stdio server has no URL or headers."
        elif self.transport == McpTransport.HTTP:
            if not self.url:
                errors["url"] = "A streamable HTTP server needs a URL."
            try:
                check_header_names(check_secret_map(self.headers, what="Headers"), what="Headers")
            except ValidationError as exc:
                errors["headers"] = exc.messages[0]
            if self.command or self.args or self.env:
                errors["command"] = "An HTTP server has no command, arguments or environment."
        for name, problem in self.user_token_problems().items():
            errors.setdefault(name, problem)
        if errors:
            raise ValidationError(errors)
