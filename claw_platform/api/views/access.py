"""API keys and pairing codes (admin scope), and the device pairing exchange (A5)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins
from rest_framework.exceptions import APIException
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from claw_platform.api.actions.keys import (
    InvalidPairingCode,
    do_create_api_key,
    do_issue_pairing_code,
    do_pair_device,
    do_revoke_api_key,
)
from claw_platform.api.errors import ApiError
from claw_platform.api.models import ApiKey
from claw_platform.api.serializers.access import (
    ApiKeyCreatedSerializer,
    ApiKeyCreateSerializer,
    ApiKeySerializer,
    PairedSerializer,
    PairingCodeCreateSerializer,
    PairingCodeSerializer,
    PairSerializer,
)
from claw_platform.api.throttling import LockOut, PairRateThrottle, source_address
from claw_platform.api.views.base import TenantAPIView, TenantViewSet
from claw_platform.audit.actions import client_ip, record_audit_event
from claw_platform.tenancy.models import Tenant


class ApiKeyViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, TenantViewSet
):
    """The tenant's API keys. Creating one shows the key once; deleting revokes it."""

    serializer_class = ApiKeySerializer
    read_scope = "admin"
    write_scope = "admin"
    lookup_value_regex = r"[0-9]{1,18}"
    http_method_names = ["get", "post", "delete", "head", "options"]

    def scoped_queryset(self) -> Any:
        return ApiKey.objects.all().order_by("-created_at", "-id")

    @extend_schema(request=ApiKeyCreateSerializer, responses={201: ApiKeyCreatedSerializer})
    def create(self, request: Request) -> Response:
        body = ApiKeyCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if data["expires_at"] is not None and data["expires_at"] <= timezone.now():
            raise ApiError(
                400,
                "invalid",
                "expires_at: Must be in the future.",
                {"expires_at": ["Must be in the future."]},
            )
        api_key, plaintext = do_create_api_key(
            Tenant.objects.get(pk=self.principal.tenant_id),
            name=data["name"],
            scopes=data["scopes"],
            expires_at=data["expires_at"],
            created_by=self.principal.session_user,
            source="api",
            acting_user=self.principal.acting_user,
            ip=client_ip(request),
        )
        api_key.key = plaintext  # type: ignore[attr-defined]
        return Response(ApiKeyCreatedSerializer(api_key).data, status=201)

    def perform_destroy(self, instance: ApiKey) -> None:
        do_revoke_api_key(instance, acting_user=self.principal.acting_user, ip=client_ip(self.request))


class PairingCodeView(TenantAPIView):
    """Issue a one-time pairing code (admin scope); a device exchanges it at /pair/."""

    write_scope = "admin"

    @extend_schema(request=PairingCodeCreateSerializer, responses={201: PairingCodeSerializer})
    def post(self, request: Request) -> Response:
        body = PairingCodeCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        pairing, code = do_issue_pairing_code(
            Tenant.objects.get(pk=self.principal.tenant_id),
            name=data["name"],
            scopes=data["scopes"],
            ttl=timedelta(seconds=data["ttl_seconds"]),
            acting_user=self.principal.acting_user,
            # A person's key issues codes for keys that act as that person.
            created_by=self.principal.session_user,
            ip=client_ip(request),
        )
        return Response(
            PairingCodeSerializer(
                {
                    "id": pairing.pk,
                    "code": code,
                    "name": pairing.name,
                    "scopes": pairing.scopes,
                    "expires_at": pairing.expires_at,
                }
            ).data,
            status=201,
        )


def pair_lockout(ip: str) -> LockOut:
    return LockOut(
        "pair",
        ip,
        max_failures=settings.CLAW_PAIR_MAX_FAILURES,
        lockout_seconds=settings.CLAW_PAIR_LOCKOUT_SECONDS,
    )


class PairView(APIView):
    """Exchange a one-time code (``X-Pairing-Code`` header or ``code`` field) for an
    API key. Rate-limited per address; repeated wrong codes lock the address out
    (429 with Retry-After), as ZeroClaw's gateway does."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    throttle_classes = [PairRateThrottle]
    max_body_bytes = 4096

    @extend_schema(
        request=PairSerializer,
        responses={200: PairedSerializer},
        parameters=[
            OpenApiParameter("X-Pairing-Code", str, location=OpenApiParameter.HEADER, required=False)
        ],
        auth=[],
    )
    def post(self, request: Request) -> Response:
        ip = client_ip(request)
        lockout = pair_lockout(source_address(request))
        left = lockout.locked_for()
        if left is not None:
            raise _locked(left)
        try:
            body = PairSerializer(data=request.data)
            body.is_valid(raise_exception=True)
        except APIException:
            # A body the exchange cannot read is a failed attempt like a wrong code:
            # malformed requests must not be a free way to probe the endpoint.
            if lockout.fail():
                raise _locked_now(ip) from None
            raise
        code = request.META.get("HTTP_X_PAIRING_CODE") or body.validated_data.get("code") or ""
        if not code.strip():
            raise ApiError(
                400,
                "invalid",
                "code: Send the pairing code (X-Pairing-Code header or code field).",
                {"code": ["Required."]},
            )
        try:
            api_key, plaintext = do_pair_device(code, ip=ip)
        except InvalidPairingCode:
            if lockout.fail():
                raise _locked_now(ip) from None
            raise ApiError(401, "invalid_code", "This pairing code is wrong, used or expired.") from None
        lockout.succeed()
        expires_in = (
            int((api_key.expires_at - timezone.now()).total_seconds()) if api_key.expires_at else None
        )
        return Response(
            PairedSerializer(
                {
                    "token": plaintext,
                    "expires_in": expires_in,
                    "scopes": api_key.scopes,
                    "tenant": api_key.tenant.slug,
                }
            ).data
        )

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        from claw_platform.api.views.base import content_length

        if content_length(request) > self.max_body_bytes:
            raise ApiError(413, "payload_too_large", "The request body is too large.")
        super().initial(request, *args, **kwargs)


def _locked_now(ip: str | None) -> ApiError:
    """The failure that locks the address out: audited (Z3), then refused."""
    record_audit_event(
        action="pairing.locked_out",
        actor=f"address {ip}" if ip else "unknown address",
        object_type="pairing",
        object_id=(ip or "")[:64],
        object_repr=f"pairing from {ip} locked out",
        diff={"lockout_seconds": settings.CLAW_PAIR_LOCKOUT_SECONDS},
        ip=ip,
    )
    return _locked(float(settings.CLAW_PAIR_LOCKOUT_SECONDS))


def _locked(seconds: float) -> ApiError:
    error = ApiError(429, "locked_out", "Too many wrong pairing codes from this address; try again later.")
    error.wait = seconds  # type: ignore[attr-defined]
    return error
