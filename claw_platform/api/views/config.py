"""Agents (with their context files and revisions), providers and model profiles.
Configuration needs the admin scope to write; providers and model profiles (which
hold and reveal endpoints) need it to read as well."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agents.actions.config import (
    do_create_agent,
    do_create_model_profile,
    do_create_provider,
    do_save_agent_file,
)
from agents.actions.revisions import do_restore_agent_revision
from agents.models import Agent, AgentFile, AgentRevision, LLMProvider, ModelProfile
from claw_platform.api.actions.config import (
    do_delete_agent,
    do_delete_model_profile,
    do_delete_provider,
    do_update_agent,
    do_update_model_profile,
    do_update_provider,
)
from claw_platform.api.errors import ApiError
from claw_platform.api.serializers.config import (
    AgentFileSerializer,
    AgentFileWriteSerializer,
    AgentRevisionDetailSerializer,
    AgentRevisionSerializer,
    AgentSerializer,
    ModelProfileSerializer,
    ProviderSerializer,
    check_file_name,
)
from claw_platform.api.views.base import TenantViewSet
from claw_platform.audit.actions import client_ip


class CrudViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    TenantViewSet,
):
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    write_scope = "admin"


class AgentViewSet(CrudViewSet):
    """Agents of the tenant, by slug."""

    serializer_class = AgentSerializer
    lookup_field = "slug"
    lookup_value_regex = r"[-a-zA-Z0-9_]+"
    filterset_fields = ["enabled", "role", "agent_type"]

    def scoped_queryset(self) -> Any:
        return Agent.objects.all().order_by("name", "id")

    def perform_create(self, serializer: Any) -> None:
        data = dict(serializer.validated_data)
        tenant = self.request.auth.tenant_id  # type: ignore[union-attr]
        from claw_platform.tenancy.models import Tenant

        serializer.instance = do_create_agent(
            Tenant.objects.get(pk=tenant),
            slug=data.pop("slug"),
            name=data.pop("name"),
            model=data.pop("model"),
            acting_user=self.principal.acting_user,
            **data,
        )

    def perform_update(self, serializer: Any) -> None:
        serializer.instance = do_update_agent(
            serializer.instance,
            dict(serializer.validated_data),
            acting_user=self.principal.acting_user,
            ip=client_ip(self.request),
        )

    def perform_destroy(self, instance: Agent) -> None:
        do_delete_agent(instance, acting_user=self.principal.acting_user, ip=client_ip(self.request))

    @extend_schema(responses=AgentFileSerializer(many=True))
    @action(detail=True, methods=["get"], url_path="files", pagination_class=None, filterset_fields=[])
    def files(self, request: Request, slug: str) -> Response:
        agent = self.get_object()
        files = AgentFile.objects.filter(agent=agent, user__isnull=True).order_by("name")
        return Response(AgentFileSerializer(files, many=True).data)

    @extend_schema(methods=["GET"], responses=AgentFileSerializer)
    @extend_schema(methods=["PUT"], request=AgentFileWriteSerializer, responses=AgentFileSerializer)
    @action(
        detail=True,
        methods=["get", "put"],
        url_path=r"files/(?P<file_name>[A-Za-z0-9_.-]+)",
        filterset_fields=[],
        http_method_names=["get", "put", "head", "options"],
    )
    def file(self, request: Request, slug: str, file_name: str) -> Response:
        agent = self.get_object()
        if request.method == "GET":
            agent_file = AgentFile.objects.filter(agent=agent, user__isnull=True, name=file_name).first()
            if agent_file is None:
                raise ApiError(404, "not_found", "This agent has no such file.")
            return Response(AgentFileSerializer(agent_file).data)
        check_file_name(file_name)
        body = AgentFileWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        saved = do_save_agent_file(
            agent, file_name, body.validated_data["content"], acting_user=self.principal.acting_user
        )
        return Response(AgentFileSerializer(saved).data)

    @extend_schema(responses=AgentRevisionSerializer(many=True))
    @action(detail=True, methods=["get"], url_path="revisions", filterset_fields=[])
    def revisions(self, request: Request, slug: str) -> Response:
        agent = self.get_object()
        queryset = AgentRevision.objects.filter(agent=agent).select_related("created_by").order_by("-number")
        page = self.paginate_queryset(queryset)
        return self.get_paginated_response(AgentRevisionSerializer(page, many=True).data)

    @extend_schema(responses=AgentRevisionDetailSerializer)
    @action(detail=True, methods=["get"], url_path=r"revisions/(?P<number>[0-9]{1,9})", filterset_fields=[])
    def revision(self, request: Request, slug: str, number: str) -> Response:
        return Response(AgentRevisionDetailSerializer(self._revision(number)).data)

    @extend_schema(request=None, responses=AgentRevisionDetailSerializer)
    @action(
        detail=True,
        methods=["post"],
        url_path=r"revisions/(?P<number>[0-9]{1,9})/restore",
        write_scope="admin",
        filterset_fields=[],
    )
    def restore(self, request: Request, slug: str, number: str) -> Response:
        revision = self._revision(number)
        with transaction.atomic():
            restored = do_restore_agent_revision(
                revision, acting_user=self.principal.acting_user, ip=client_ip(request)
            )
        return Response(AgentRevisionDetailSerializer(restored).data)

    def _revision(self, number: str) -> AgentRevision:
        revision = AgentRevision.objects.filter(agent=self.get_object(), number=int(number)).first()
        if revision is None:
            raise ApiError(404, "not_found", "This agent has no such revision.")
        return revision


class ProviderViewSet(CrudViewSet):
    """LLM providers. The API key is write-only: stored encrypted, never returned."""

    serializer_class = ProviderSerializer
    read_scope = "admin"
    filterset_fields = ["kind", "enabled"]

    def scoped_queryset(self) -> Any:
        return LLMProvider.objects.all().order_by("name", "id")

    def perform_create(self, serializer: Any) -> None:
        from claw_platform.tenancy.models import Tenant

        data = dict(serializer.validated_data)
        serializer.instance = do_create_provider(
            Tenant.objects.get(pk=self.principal.tenant_id),
            name=data.pop("name"),
            kind=data.pop("kind"),
            base_url=data.pop("base_url"),
            api_key=data.pop("api_key", ""),
            acting_user=self.principal.acting_user,
            **data,
        )

    def perform_update(self, serializer: Any) -> None:
        serializer.instance = do_update_provider(
            serializer.instance,
            dict(serializer.validated_data),
            acting_user=self.principal.acting_user,
            ip=client_ip(self.request),
        )

    def perform_destroy(self, instance: LLMProvider) -> None:
        do_delete_provider(instance, acting_user=self.principal.acting_user, ip=client_ip(self.request))


class ModelProfileViewSet(CrudViewSet):
    """Model profiles: a provider's model with its prices and limits."""

    serializer_class = ModelProfileSerializer
    read_scope = "admin"
    filterset_fields = ["provider", "supports_tools"]

    def scoped_queryset(self) -> Any:
        return ModelProfile.objects.select_related("provider").order_by("model", "id")

    def perform_create(self, serializer: Any) -> None:
        data = dict(serializer.validated_data)
        serializer.instance = do_create_model_profile(
            data.pop("provider"), model=data.pop("model"), acting_user=self.principal.acting_user, **data
        )

    def perform_update(self, serializer: Any) -> None:
        serializer.instance = do_update_model_profile(
            serializer.instance,
            dict(serializer.validated_data),
            acting_user=self.principal.acting_user,
            ip=client_ip(self.request),
        )

    def perform_destroy(self, instance: ModelProfile) -> None:
        do_delete_model_profile(instance, acting_user=self.principal.acting_user, ip=client_ip(self.request))
