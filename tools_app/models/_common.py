"""Fields and helpers the extension models share."""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

from agents.providers.headers import header_problem
from claw_platform.crypto import EncryptedTextField


def agents_field() -> models.ManyToManyField:
    """Which of the tenant's agents a row applies to; none chosen means every agent."""
    return models.ManyToManyField(
        "agents.Agent",
        blank=True,
        related_name="+",
        help_text="The agents this applies to. Leave empty for every agent of the tenant.",
    )


def secret_map_field(help_text: str) -> EncryptedTextField:
    """A JSON object of names to secret values (headers, environment), encrypted at rest."""
    field = EncryptedTextField(blank=True, default="", help_text=help_text)
    field.secret_multiline = True
    return field


def load_secret_map(raw: str) -> dict[str, str]:
    """The stored map (``{}`` when empty); only valid maps are ever saved."""
    if not raw:
        return {}
    value = json.loads(raw)
    return {str(k): str(v) for k, v in value.items()}


def check_secret_map(raw: str, *, what: str) -> dict[str, str]:
    """Parse and check a map typed in the admin; raises ValidationError with a clear message."""
    if not raw:
        return {}
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{what}: not valid JSON ({exc.msg}).") from None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValidationError(
            f'{what}: expected a JSON object of strings, e.g. {{"Authorization": "Bearer ..."}}.'
        )
    return {str(k): v for k, v in value.items()}


def check_header_names(headers: dict[str, str], *, what: str) -> None:
    """Headers that can be sent as typed (agents.providers.headers: no CR, LF or other
    control character, names that are tokens, no framing header)."""
    for name, value in headers.items():
        problem = header_problem(name, value)
        if problem:
            raise ValidationError(f"{what}: {problem}.")
