"""LLM providers (endpoints with credentials) and the model profiles on them."""

from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, URLValidator
from django.db import models

from agents.providers.headers import headers_problem
from claw_platform.crypto import EncryptedTextField
from claw_platform.tenancy.models import TenantOwned


class ProviderKind(models.TextChoices):
    ANTHROPIC = "anthropic", "Anthropic Messages API"
    OPENAI_COMPATIBLE = "openai_compatible", "OpenAI-compatible Chat Completions"


DEFAULT_BASE_URLS = {
    ProviderKind.ANTHROPIC: "https://api.anthropic.com",
    ProviderKind.OPENAI_COMPATIBLE: "https://api.openai.com/v1",
}


def validate_string_map(value: object) -> None:
    """Extra headers: a JSON object of header names to values that can be sent as they are."""
    if not isinstance(value, dict):
        raise ValidationError('Must be a JSON object, e.g. {"X-Title": "Claw"}.')
    problem = headers_problem(value)
    if problem:
        raise ValidationError(problem[:1].upper() + problem[1:] + ".")


def validate_json_object(value: object) -> None:
    if not isinstance(value, dict):
        raise ValidationError('Must be a JSON object, e.g. {"top_p": 0.9}.')


class LLMProvider(TenantOwned):
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=32, choices=ProviderKind.choices)
    base_url = models.CharField(
        max_length=500,
        validators=[URLValidator(schemes=["http", "https"])],
        help_text="e.g. https://api.anthropic.com, https://api.openai.com/v1, http://127.0.0.1:11434/v1",
    )
    api_key = EncryptedTextField(blank=True, help_text="Stored encrypted; never shown again.")
    extra_headers = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_string_map],
        help_text="Extra HTTP headers as a JSON object (no credentials: use the API key).",
    )
    body_overrides = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_json_object],
        help_text='Merged into every request body, e.g. {"provider": {"order": ["groq"]}}.',
    )
    timeout_seconds = models.PositiveIntegerField(
        default=120, validators=[MinValueValidator(1), MaxValueValidator(3600)]
    )
    max_retries = models.PositiveIntegerField(default=3, validators=[MaxValueValidator(10)])
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "LLM provider"
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="provider_unique_name")]

    def __str__(self) -> str:
        return self.name


def _price_field(help_text: str) -> models.DecimalField:
    # Empty means "unknown" (a money budget refuses the model), 0 means free.
    return models.DecimalField(
        max_digits=12,
        decimal_places=4,
        null=True,
        blank=True,
        default=None,
        help_text=help_text + "; empty: unknown (refused under a money budget), 0: free",
        validators=[MinValueValidator(Decimal("0"))],
    )


class ModelKind(models.TextChoices):
    CHAT = "chat", "Chat"
    EMBEDDING = "embedding", "Embedding"


MAX_EMBEDDING_DIMENSION = 2_000  # pgvector's HNSW indexes vector up to 2,000 dimensions


class ModelProfile(TenantOwned):
    provider = models.ForeignKey(LLMProvider, on_delete=models.PROTECT, related_name="models")
    model = models.CharField(max_length=200, help_text="The provider's model id, e.g. claude-sonnet-4-5")
    label = models.CharField(max_length=200, blank=True)
    kind = models.CharField(
        max_length=16,
        choices=ModelKind.choices,
        default=ModelKind.CHAT,
        db_default=ModelKind.CHAT,
        help_text="Embedding: a model of the provider's OpenAI-compatible /embeddings (P7).",
    )
    dimension = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_EMBEDDING_DIMENSION)],
        help_text="An embedding model's vector size, e.g. 1536 (checked on every answer).",
    )
    use_for_memory = models.BooleanField(
        default=False,
        db_default=False,
        help_text="This embedding model embeds the tenant's memories instead of the local one; "
        "changing it re-embeds every memory in the background.",
    )
    context_window = models.PositiveIntegerField(
        default=200_000, validators=[MinValueValidator(1024), MaxValueValidator(10_000_000)]
    )
    max_output_tokens = models.PositiveIntegerField(
        default=8192, validators=[MinValueValidator(1), MaxValueValidator(1_000_000)]
    )
    input_price = _price_field("USD per million input tokens")
    output_price = _price_field("USD per million output tokens")
    cache_read_price = _price_field("USD per million cache-read tokens")
    cache_write_price = _price_field("USD per million cache-write tokens")
    supports_tools = models.BooleanField(default=True)
    supports_vision = models.BooleanField(default=False)
    supports_thinking = models.BooleanField(default=False)

    class Meta:
        ordering = ["provider__name", "model"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "provider", "model"], name="modelprofile_unique_model"),
            models.UniqueConstraint(
                fields=["tenant"],
                condition=models.Q(use_for_memory=True),
                name="modelprofile_one_memory_embedder",
            ),
        ]

    def __str__(self) -> str:
        return self.label or f"{self.provider.name}:{self.model}"

    def clean(self) -> None:
        if self.provider_id and self.tenant_id and self.provider.tenant_id != self.tenant_id:
            raise ValidationError({"provider": "Provider belongs to another tenant."})
        if self.max_output_tokens and self.context_window and self.max_output_tokens >= self.context_window:
            raise ValidationError({"max_output_tokens": "Must be smaller than the context window."})
        if self.kind == ModelKind.EMBEDDING:
            if not self.dimension:
                raise ValidationError({"dimension": "An embedding model needs its dimension."})
            if self.provider_id and self.provider.kind != "openai_compatible":
                raise ValidationError(
                    {"provider": "Embeddings need an OpenAI-compatible provider (/embeddings)."}
                )
        elif self.use_for_memory:
            raise ValidationError({"use_for_memory": "Only an embedding model can embed memories."})
