"""DRF authentication: ``Authorization: Bearer <key>`` or the login session (A1).

Either way the request ends up with a :class:`Principal` for one tenant in
``request.auth``; the tenant context is set by ``views.base.TenantAPIView``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from claw_platform.api.key_cache import key_cache
from claw_platform.api.listener import process_listener
from claw_platform.api.models import ApiKey
from claw_platform.api.principal import Principal
from claw_platform.api.secrets import key_matches, key_prefix
from claw_platform.tenancy.lookup import active_membership
from claw_platform.tenancy.middleware import SESSION_TENANT_KEY

# last_used_at is written at most this often per key: one UPDATE a minute, not per call.
LAST_USED_RESOLUTION = timedelta(seconds=60)


def bearer_token(request: Any) -> str | None:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def authenticate_key(token: str) -> ApiKey:
    """The active key for ``token``; AuthenticationFailed otherwise (one message for
    unknown, revoked and expired keys, so a caller learns nothing from it). A key
    this process read before comes from :mod:`claw_platform.api.key_cache`."""
    prefix = key_prefix(token)
    api_key = _load_key(prefix) if prefix else None
    if api_key is None or not key_matches(token, api_key.key_hash) or not api_key.is_active:
        raise exceptions.AuthenticationFailed("Invalid, expired or revoked API key.")
    now = timezone.now()
    if api_key.last_used_at is None or now - api_key.last_used_at > LAST_USED_RESOLUTION:
        ApiKey.objects.unscoped().filter(pk=api_key.pk).update(last_used_at=now)
        api_key.last_used_at = now
    return api_key


def _load_key(prefix: str) -> ApiKey | None:
    cached = key_cache.get(prefix)
    if cached is not None:
        return cached
    process_listener()  # keys are kept only while it listens for their changes
    version = key_cache.version()
    api_key = (
        ApiKey.objects.unscoped()
        .select_related("tenant", "created_by")
        .filter(prefix=prefix, tenant__is_active=True)
        .first()
    )
    if api_key is not None:
        key_cache.put(prefix, api_key, version)
    return api_key


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, Principal] | None:
        token = bearer_token(request)
        if token is None:
            return None
        api_key = authenticate_key(token)
        return (api_key.created_by or _KeyUser(api_key)), Principal.for_key(api_key)

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class _KeyUser:
    """``request.user`` for a key no person created (CLI, pairing)."""

    pk = None
    id = None
    is_authenticated = True
    is_active = True
    is_staff = False
    is_superuser = False

    def __init__(self, api_key: ApiKey) -> None:
        self.api_key = api_key

    def __str__(self) -> str:
        return f"api key {self.api_key}"

    def get_username(self) -> str:
        return str(self)


class MemberSessionAuthentication(authentication.SessionAuthentication):
    """The login session (browser, docs page), for the member's active tenant."""

    def authenticate(self, request: Request) -> tuple[Any, Principal] | None:
        result = super().authenticate(request)
        if result is None:
            return None
        user = result[0]
        membership = active_membership(user, request._request.session.get(SESSION_TENANT_KEY))
        if membership is None:
            raise exceptions.PermissionDenied("You are not a member of any tenant.")
        return user, Principal.for_member(user, membership.tenant_id, membership.role)
