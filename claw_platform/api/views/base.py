"""The base of every API view: authentication, scope, rate limit, then the tenant
context of the caller for the rest of the request.

A view's ``max_body_bytes`` (default ``CLAW_API_MAX_BODY_BYTES``) is enforced on the
bytes received, before Django reads the body, by ``claw_platform.body_limit`` in front
of the application; the ``Content-Length`` test here only serves callers that bypass
the ASGI application (Django's test client)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView
from rest_framework import viewsets
from rest_framework.request import Request
from rest_framework.views import APIView

from claw_platform.api.credential_watch import credential_watch
from claw_platform.api.errors import ApiError
from claw_platform.api.principal import Principal
from claw_platform.tenancy.context import all_tenants, keep_scope_while_streaming, reset_scope, set_scope


def content_length(request: Any) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


class TenantScopedMixin:
    """Mixed into APIView/ViewSet: ``self.principal`` and the tenant context."""

    max_body_bytes: int | None = None
    _scope_token: object | None = None
    # credential_watch's generation before the caller was authenticated: a stream
    # this request serves ends if the caller's rights change after it (stream_access).
    credentials_since = 0

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        limit = self.max_body_bytes or settings.CLAW_API_MAX_BODY_BYTES
        if content_length(request) > limit:
            raise ApiError(413, "payload_too_large", f"The request body is over {limit:,} bytes.")
        self.credentials_since = credential_watch.generation()
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        principal = request.auth
        if isinstance(principal, Principal):
            self._scope_token = set_scope(principal.tenant_id)

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            # A streamed body runs after this returns: it keeps the caller's tenant.
            return keep_scope_while_streaming(super().dispatch(request, *args, **kwargs))  # type: ignore[misc]
        finally:
            if self._scope_token is not None:
                reset_scope(self._scope_token)
                self._scope_token = None

    @property
    def principal(self) -> Principal:
        principal = self.request.auth  # type: ignore[attr-defined]
        assert isinstance(principal, Principal)
        return principal


class TenantAPIView(TenantScopedMixin, APIView):
    pass


class TenantViewSet(TenantScopedMixin, viewsets.GenericViewSet):
    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no tenant, no rows
            return self.get_serializer_class().Meta.model._base_manager.none()
        return self.scoped_queryset()

    def scoped_queryset(self) -> Any:
        raise NotImplementedError


class SchemaView(SpectacularAPIView):
    """The OpenAPI schema. Building it introspects querysets and filters of every
    view; it reads no rows, so it runs outside any one tenant."""

    @extend_schema(exclude=True)
    def get(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        with all_tenants():
            return super().get(request, *args, **kwargs)
