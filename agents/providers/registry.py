"""Provider kinds by name, loaded on first use; ``provider:model`` references.

Like healthchecks' ``TRANSPORTS`` and pydantic-ai's ``infer_model``: a table maps a
kind to the class that speaks it, imported only when a provider of that kind is built,
so a process that never talks to Anthropic never imports its adapter.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import NamedTuple

from agents.engine.interfaces import LLMProvider

#: kind -> "module:Class". Add a vendor by adding a file and a line here.
PROVIDER_KINDS: dict[str, str] = {
    "anthropic": "agents.providers.anthropic:AnthropicProvider",
    "openai_compatible": "agents.providers.openai_compat:OpenAICompatProvider",
}

#: Well-known names that speak an existing kind's wire format.
KIND_ALIASES: dict[str, str] = {
    "openai": "openai_compatible",
    "openrouter": "openai_compatible",
    "ollama": "openai_compatible",
    "vllm": "openai_compatible",
    "groq": "openai_compatible",
    "deepseek": "openai_compatible",
}

_loaded: dict[str, type] = {}


class ModelRef(NamedTuple):
    provider: str
    model: str


def parse_model_ref(ref: str) -> ModelRef:
    """Split ``"provider:model"``; the model may itself contain colons (``llama3:8b``)."""
    provider, sep, model = ref.strip().partition(":")
    if not sep or not provider or not model:
        raise ValueError(f"model reference {ref!r} is not of the form 'provider:model'")
    return ModelRef(provider, model)


def resolve_kind(kind: str) -> str:
    """The canonical kind for ``kind`` or an alias; ``ValueError`` if unknown."""
    name = kind.strip().lower()
    name = KIND_ALIASES.get(name, name)
    if name not in PROVIDER_KINDS:
        known = ", ".join(sorted([*PROVIDER_KINDS, *KIND_ALIASES]))
        raise ValueError(f"unknown provider kind {kind!r} (known: {known})")
    return name


def provider_class(kind: str) -> type:
    """Import (once) and return the adapter class for ``kind``."""
    name = resolve_kind(kind)
    if name not in _loaded:
        module_name, _, class_name = PROVIDER_KINDS[name].partition(":")
        _loaded[name] = getattr(importlib.import_module(module_name), class_name)
    return _loaded[name]


def build_provider(
    kind: str,
    *,
    base_url: str,
    api_key: str,
    name: str = "",
    extra_headers: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    max_retries: int = 3,
) -> LLMProvider:
    """Build a provider of ``kind``. Call ``await provider.aclose()`` when done with it."""
    cls = provider_class(kind)
    provider: LLMProvider = cls(
        base_url=base_url,
        api_key=api_key,
        name=name,
        extra_headers=extra_headers,
        timeout=timeout,
        max_retries=max_retries,
    )
    return provider
