"""HTTP tools (T11): tools the admin defines as one HTTP request."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from claw_platform.tenancy.models import TenantOwned
from tools_app.http_tools.templates import TemplateError, check_url_template
from tools_app.models._common import (
    agents_field,
    check_header_names,
    check_secret_map,
    load_secret_map,
    secret_map_field,
)
from tools_app.models.user_tokens import PerUserTokenFields
from tools_app.registry import builtin_registry

HTTP_TOOL_NAME_RE = r"^[a-z][a-z0-9_]{0,47}$"


class HttpMethod(models.TextChoices):
    GET = "GET"
    POST = "POST"
    PUT = "PUT"
    PATCH = "PATCH"
    DELETE = "DELETE"


def default_schema() -> dict[str, object]:
    return {"type": "object", "properties": {}, "additionalProperties": False}


class HttpTool(TenantOwned, PerUserTokenFields):
    """A tool the model calls like any other: its arguments (checked against
    ``input_schema``) fill the URL template; the rest go in the query (GET, DELETE) or a
    JSON body (POST, PUT, PATCH). Requests go through the SSRF guard; the answer is cut
    at ``max_response_bytes``."""

    name = models.CharField(
        max_length=48,
        validators=[
            RegexValidator(HTTP_TOOL_NAME_RE, "Lower-case letters, digits and _ (e.g. create_ticket).")
        ],
        help_text="The tool name the model sees.",
    )
    description = models.TextField(help_text="What the tool does and when to use it: the model reads this.")
    input_schema = models.JSONField(
        default=default_schema,
        help_text="JSON Schema (draft 2020-12) of the arguments, an object; URL placeholders must be properties.",
    )
    method = models.CharField(max_length=8, choices=HttpMethod.choices, default=HttpMethod.GET)
    url_template = models.CharField(
        max_length=1000,
        help_text="e.g. https://api.example.com/v1/tickets/{ticket_id} (placeholders in path/query).",
    )
    headers = secret_map_field(
        'Request headers as a JSON object, e.g. {"Authorization": "Bearer ..."}. Stored encrypted.'
    )
    timeout_seconds = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(300)]
    )
    max_response_bytes = models.PositiveIntegerField(
        default=100_000,
        validators=[MinValueValidator(100), MaxValueValidator(5_000_000)],
        help_text="Longer answers are cut here.",
    )
    enabled = models.BooleanField(default=True)
    agents = agents_field()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "HTTP tool"
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="httptool_unique_name")]

    def __str__(self) -> str:
        return self.name

    def header_map(self) -> dict[str, str]:
        return load_secret_map(self.headers)

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.name in builtin_registry or self.name.startswith("mcp_"):
            errors["name"] = "This name belongs to a built-in tool or the MCP namespace; choose another."
        schema = self.input_schema
        properties: dict[str, object] = {}
        if not isinstance(schema, dict) or schema.get("type") != "object":
            errors["input_schema"] = 'The schema must be a JSON object with "type": "object".'
        else:
            try:
                Draft202012Validator.check_schema(schema)
            except SchemaError as exc:
                errors["input_schema"] = f"Invalid JSON Schema: {exc.message}"
            raw = schema.get("properties", {})
            properties = raw if isinstance(raw, dict) else {}
        try:
            placeholders = check_url_template(self.url_template or "")
        except TemplateError as exc:
            errors["url_template"] = str(exc)
        else:
            missing = [p for p in placeholders if p not in properties]
            if missing and "input_schema" not in errors:
                errors["url_template"] = "Placeholders missing from the schema's properties: " + ", ".join(
                    missing
                )
        try:
            check_header_names(check_secret_map(self.headers, what="Headers"), what="Headers")
        except ValidationError as exc:
            errors["headers"] = exc.messages[0]
        for name, problem in self.user_token_problems().items():
            errors.setdefault(name, problem)
        if errors:
            raise ValidationError(errors)
