"""Secrets at rest (X3): Fernet (AES-128-CBC + HMAC) with key rotation (MultiFernet).

``EncryptedTextField`` stores ``fernet:<token>`` and hands Python the plaintext; the
column never holds plaintext. Fields carry ``secret = True`` so audit snapshots and
admin forms mask them and never echo them back.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import models

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
