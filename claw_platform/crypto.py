"""Secrets at rest (X3): Fernet (AES-128-CBC + HMAC) with key rotation (MultiFernet).

``EncryptedTextField`` stores ``fernet:<token>`` and hands Python the plaintext; the
column never holds plaintext. It and ``DigestField`` carry ``secret = True``, the
declaration every form, admin page, audit snapshot and serializer honours
(``claw_platform.secret_fields``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import models
from django.utils.text import capfirst

from claw_platform.secret_fields import KEEP_SECRET

PREFIX = "fernet:"


class SecretDecryptionError(Exception):
    """A stored secret cannot be decrypted with the configured keys."""


@lru_cache(maxsize=4)
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(k.encode()) for k in keys])


def _cipher() -> MultiFernet:
    return _fernet(tuple(settings.CLAW_SECRETS_KEYS))


def encrypt_secret(plaintext: str) -> str:
    return PREFIX + _cipher().encrypt(plaintext.encode()).decode()


def decrypt_secret(stored: str) -> str:
    if not stored.startswith(PREFIX):
        raise SecretDecryptionError("stored secret is not encrypted")
    try:
        return _cipher().decrypt(stored[len(PREFIX) :].encode()).decode()
    except InvalidToken:
        raise SecretDecryptionError(
            "a stored secret cannot be decrypted: was CLAW_SECRETS_KEY changed without keeping the old key?"
        ) from None


class EncryptedTextField(models.TextField):
    secret = True
    # A textarea rather than a password input in forms (JSON maps of headers).
    secret_multiline = False

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> str | None:
        if value is None or value == "":
            return value
        return decrypt_secret(value)

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        if value is None or value == "":
            return value
        if isinstance(value, str) and value.startswith(PREFIX):
            return value
        return encrypt_secret(str(value))

    def formfield(self, form_class: Any = None, choices_form_class: Any = None, **kwargs: Any) -> Any:
        # Always the write-only field, whatever widget or class a caller asks for.
        from claw_platform.secret_forms import SecretFormField

        return SecretFormField(
            multiline=self.secret_multiline,
            label=kwargs.get("label") or capfirst(self.verbose_name),
            help_text=self.help_text,
        )

    def save_form_data(self, instance: models.Model, data: Any) -> None:
        if data is KEEP_SECRET:
            return  # nothing typed: the stored value stays
        super().save_form_data(instance, data)


class DigestField(models.CharField):
    """A one-way digest of a secret (API keys, pairing codes): compared, never shown."""

    secret = True
