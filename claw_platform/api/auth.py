"""DRF authentication: ``Authorization: Bearer <key>`` or the login session (A1).

Either way the request ends up with a :class:`Principal` for one tenant in
``request.auth``; the tenant context is set by ``views.base.TenantAPIView``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import OuterRef, Subquery
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
from claw_platform.tenancy.models import Membership
from claw_platform.tenancy.rls import system_bypass

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
    unknown, revoked and expired keys, and keys whose creator left the tenant or was
    deactivated, so a caller learns nothing from it). The key carries its creator's
    current role as ``creator_role`` (:meth:`Principal.for_key`). A key this process
    read before comes from :mod:`claw_platform.api.key_cache`."""
    prefix = key_prefix(token)
    api_key = _load_key(prefix) if prefix else None
    if (
        api_key is None
        or not key_matches(token, api_key.key_hash)
        or not api_key.is_active
        or not _creator_still_acts(api_key)
    ):
        raise exceptions.AuthenticationFailed("Invalid, expired or revoked API key.")
    now = timezone.now()
    if api_key.last_used_at is None or now - api_key.last_used_at > LAST_USED_RESOLUTION:
        with system_bypass():  # the key's own row, found by its prefix before any tenant is known
            ApiKey.objects.unscoped().filter(pk=api_key.pk).update(last_used_at=now)
        api_key.last_used_at = now
    return api_key


def _creator_still_acts(api_key: ApiKey) -> bool:
    """A key a person made works while that person is an active member of its tenant."""
    if api_key.created_by_id is None:
        return True  # the operator's: no person behind it
    creator = api_key.created_by
    return creator is not None and creator.is_active and api_key.creator_role is not None  # type: ignore[attr-defined]


def _load_key(prefix: str) -> ApiKey | None:
    cached = key_cache.get(prefix)
    if cached is not None:
        return cached
    process_listener()  # keys are kept only while it listens for their changes
    version = key_cache.version()
    # The creator's role now: the cache forgets every key when a membership or a
    # user changes (migration api/0005), so a cached role is never stale.
    creator_role = Membership.objects.unscoped().filter(
        tenant_id=OuterRef("tenant_id"), user_id=OuterRef("created_by_id")
    )
    with system_bypass():  # API key -> tenant: the key is what says which tenant this is
        api_key = (
            ApiKey.objects.unscoped()
            .select_related("tenant", "created_by")
            .annotate(creator_role=Subquery(creator_role.values("role")[:1]))
            .filter(prefix=prefix, tenant__is_active=True)
            .first()
        )
    # A key whose creator cannot act now is not kept: adding them back (a new
    # membership, which notifies nobody) takes effect on the next call.
    if api_key is not None and _creator_still_acts(api_key):
        key_cache.put(prefix, api_key, version)
    return api_key


def principal_changed(principal: Principal) -> bool:
    """After a change to its credentials: whether ``principal`` no longer holds, or
    now holds other rights (a key revoked, its creator's role changed, a member
    removed, an account or tenant deactivated ...)."""
    if principal.api_key is not None:
        api_key = _load_key(principal.api_key.prefix)
        if api_key is None or not api_key.is_active or not _creator_still_acts(api_key):
            return True
        now = Principal.for_key(api_key)
    else:
        user = get_user_model()._default_manager.filter(pk=principal.user.pk, is_active=True).first()
        membership = active_membership(user, principal.tenant_id) if user is not None else None
        if membership is None or membership.tenant_id != principal.tenant_id:
            return True
        now = Principal.for_member(user, membership.tenant_id, membership.role)
    return now.caller != principal.caller or now.scopes != principal.scopes


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
