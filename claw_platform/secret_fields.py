"""Secret model fields: the one declaration every renderer honours.

A model field is secret when it carries ``secret = True``: ``EncryptedTextField``
(provider keys, webhook and hook signing secrets, MCP and HTTP tool headers and
environments), ``DigestField`` (hashes of API keys and pairing codes), and Django's
password hash (declared in ``ClawAdminConfig.ready``). Nothing shows a secret's value:

- forms get a write-only input (``claw_platform.secret_forms``): blank keeps the
  stored value, an explicit "remove" clears it;
- every admin page shows "set" / "not set" in its place, in read-only views, change
  lists and filters (``claw_platform.admin.secrets``, applied by the admin site to
  every ModelAdmin and inline it registers);
- audit snapshots and agent revisions hold "set" and a short keyed fingerprint
  (a replaced key shows up as a change, the key never does);
- API serializers make such a field write-only (``claw_platform.api.serializers.base``).
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils.crypto import salted_hmac

SET = "set"
NOT_SET = "not set"


class KeepSecret:
    """What a secret form field cleans to when nothing was typed: keep the stored value."""

    def __repr__(self) -> str:
        return "KEEP_SECRET"

    def __bool__(self) -> bool:
        return False


KEEP_SECRET = KeepSecret()


def is_secret_field(field: Any) -> bool:
    return bool(getattr(field, "secret", False))


def secret_fields(model: type[models.Model] | models.Model) -> list[models.Field]:
    """The model's concrete secret fields."""
    return [f for f in model._meta.concrete_fields if is_secret_field(f)]


def secret_field_names(model: type[models.Model] | models.Model) -> frozenset[str]:
    return frozenset(f.name for f in secret_fields(model))


def declare_secret(model: type[models.Model], field_name: str) -> None:
    """Declare a field of a model this project does not define (Django's password hash) secret."""
    model._meta.get_field(field_name).secret = True  # type: ignore[union-attr]


def secret_status(value: Any) -> str:
    return SET if value else NOT_SET


def audit_value(value: Any) -> str:
    """A secret as audit snapshots and revisions record it: "" when empty, else "set"
    with 8 hex digits of an HMAC under the server's key, so a replaced secret is a
    visible change while the value (or anything to test guesses against without the
    server's key) never is."""
    if not value:
        return ""
    digest = salted_hmac("claw.secret-fingerprint", str(value), algorithm="sha256").hexdigest()
    return f"{SET} ({digest[:8]})"
