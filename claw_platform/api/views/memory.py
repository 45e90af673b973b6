"""``/api/v1/memory/``: list, search, create, update and delete memories (M1, M2),
and ``memory-injections/``: what recall put into each turn's prompt (M6).

Who sees what is ``agents.memory.access``: a member sees shared memories and their
own; another member's memory answers 404 exactly as a missing one. Injections hang
off sessions and follow the member rule."""

from __future__ import annotations

from typing import Any

import django_filters
from drf_spectacular.utils import extend_schema
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agents.actions.memory import do_delete_memory, do_update_memory
from agents.memory.access import manages_memory, may_change_memory, memories_visible_to
from agents.memory.recall import RecallSettings, recall
from agents.memory.snapshot import SNAPSHOT_FILE, hydrate, snapshot_markdown
from agents.memory.store import MemoryError, MemoryOwner, default_memory_store
from agents.models import Agent, MemoryCategory, MemoryEntry, MemoryInjection, MemoryScope
from claw_platform.api.errors import ApiError
from claw_platform.api.serializers.memory import (
    MemoryCreateSerializer,
    MemoryHitSerializer,
    MemoryHydrateSerializer,
    MemoryInjectionSerializer,
    MemorySearchSerializer,
    MemorySerializer,
    MemorySnapshotQuerySerializer,
    MemorySnapshotSerializer,
    MemoryUpdateSerializer,
)
from claw_platform.api.views.base import TenantViewSet
from claw_platform.tenancy.models import Membership


class MemoryFilter(django_filters.FilterSet):
    agent = django_filters.CharFilter(field_name="agent__slug", help_text="The agent's slug.")
    scope = django_filters.ChoiceFilter(choices=MemoryScope.choices)
    category = django_filters.ChoiceFilter(choices=MemoryCategory.choices)
    user = django_filters.NumberFilter(field_name="user_id")
    q = django_filters.CharFilter(field_name="content", lookup_expr="icontains", help_text="Text contained.")

    class Meta:
        model = MemoryEntry
        fields = ["agent", "scope", "category", "user", "q"]


def _agent(slug: str | None, field: str = "agent") -> Agent | None:
    if not slug:
        return None
    agent = Agent.objects.filter(slug=slug).first()
    if agent is None:
        raise ApiError(400, "invalid", "No agent with this slug.", {field: ["No agent with this slug."]})
    return agent


class MemoryViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, TenantViewSet
):
    """Memories: the caller's own and the shared ones (owners and admins: all)."""

    serializer_class = MemorySerializer
    filterset_class = MemoryFilter
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def scoped_queryset(self) -> Any:
        return (
            memories_visible_to(self.principal.caller).select_related("agent").order_by("-updated_at", "-id")
        )

    def _owner(self, agent: Agent | None) -> MemoryOwner:
        caller = self.principal.caller
        return MemoryOwner(
            tenant_id=caller.tenant_id,
            agent_id=agent.pk if agent else None,
            user_id=caller.user_id,
            may_write_tenant=manages_memory(caller),
            actor=f"user:{caller.user_id}" if caller.user_id else f"api key {self.principal.api_key}",
        )

    def _changeable(self) -> MemoryEntry:
        entry: MemoryEntry = self.get_object()
        if not may_change_memory(self.principal.caller, entry):
            raise ApiError(403, "forbidden", "Only owners and admins can change shared memories.")
        return entry

    @extend_schema(request=MemoryCreateSerializer, responses={201: MemorySerializer})
    def create(self, request: Request) -> Response:
        body = MemoryCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        caller = self.principal.caller
        if not caller.can_act:
            raise ApiError(403, "forbidden", "Viewers cannot write memories.")
        agent = _agent(data.get("agent"))
        scope = data["scope"]
        if scope == MemoryScope.AGENT and agent is None:
            raise ApiError(
                400, "invalid", "An agent memory names its agent.", {"agent": ["Required for scope agent."]}
            )
        if scope != MemoryScope.USER and not manages_memory(caller):
            raise ApiError(403, "forbidden", "Only owners and admins can write shared memories.")
        try:
            hit = default_memory_store().write(
                self._owner(agent), data["content"], scope=scope, category=data["category"]
            )
        except MemoryError as exc:
            raise ApiError(400, "invalid", str(exc), {"scope": [str(exc)]}) from None
        entry = MemoryEntry._base_manager.select_related("agent").get(pk=hit.id)
        return Response(MemorySerializer(entry).data, status=201)

    @extend_schema(request=MemoryUpdateSerializer, responses={200: MemorySerializer})
    def partial_update(self, request: Request, pk: Any = None) -> Response:
        entry = self._changeable()
        body = MemoryUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if not data.get("content", "x").strip():
            raise ApiError(400, "invalid", "A memory needs some content.", {"content": ["May not be blank."]})
        updated = do_update_memory(
            entry, self._owner(entry.agent), content=data.get("content"), category=data.get("category")
        )
        return Response(MemorySerializer(updated).data)

    def destroy(self, request: Request, pk: Any = None) -> Response:
        entry = self._changeable()
        do_delete_memory(entry, self._owner(entry.agent))
        return Response(status=204)

    def _snapshot_user(self, user_id: int | None) -> int | None:
        """Whose personal memories: the caller's own, or (owners and admins) a member's."""
        caller = self.principal.caller
        if user_id is None or user_id == caller.user_id:
            return caller.user_id
        if not manages_memory(caller):
            raise ApiError(
                403, "forbidden", "Only owners and admins can export or fill another member's memories."
            )
        if not Membership.objects.unscoped().filter(tenant_id=caller.tenant_id, user_id=user_id).exists():
            raise ApiError(400, "invalid", "No member with this id.", {"user": ["No member with this id."]})
        return user_id

    @extend_schema(
        methods=["GET"], parameters=[MemorySnapshotQuerySerializer], responses={200: MemorySnapshotSerializer}
    )
    @extend_schema(
        methods=["POST"], request=MemoryHydrateSerializer, responses={201: MemorySnapshotSerializer}
    )
    @action(detail=False, methods=["get", "post"], url_path="snapshot")
    def snapshot(self, request: Request) -> Response:
        """GET: the agent's and the caller's core memories as MEMORY_SNAPSHOT.md (M4).
        POST: fill an empty store from one (owners and admins)."""
        if request.method == "POST":
            return self._hydrate(request)
        query = MemorySnapshotQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        data = query.validated_data
        scopes = [s.strip() for s in data.get("scopes", "agent,user").split(",") if s.strip()]
        unknown = [s for s in scopes if s not in MemoryScope.values]
        if unknown or not scopes:
            message = (
                f"Unknown scope {unknown[0]!r}; use tenant, agent or user." if unknown else "Name a scope."
            )
            raise ApiError(400, "invalid", message, {"scopes": [message]})
        agent = _agent(data["agent"])
        user_id = self._snapshot_user(data.get("user"))
        owner = MemoryOwner(tenant_id=self.principal.caller.tenant_id, agent_id=agent.pk, user_id=user_id)  # type: ignore[union-attr]
        content = snapshot_markdown(owner, scopes=scopes)
        return Response(
            {"agent": data["agent"], "user": user_id, "filename": SNAPSHOT_FILE, "content": content}
        )

    def _hydrate(self, request: Request) -> Response:
        caller = self.principal.caller
        if not caller.can_act or not manages_memory(caller):
            raise ApiError(
                403, "forbidden", "Only owners and admins can fill a memory store from a snapshot."
            )
        body = MemoryHydrateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        agent = _agent(data["agent"])
        user_id = self._snapshot_user(data.get("user"))
        owner = MemoryOwner(
            tenant_id=caller.tenant_id,
            agent_id=agent.pk,  # type: ignore[union-attr]
            user_id=user_id,
            may_write_tenant=True,
            actor=f"user:{caller.user_id}" if caller.user_id else f"api key {self.principal.api_key}",
        )
        try:
            written = hydrate(owner, data["content"])
        except MemoryError as exc:
            status, code = (409, "conflict") if "not empty" in str(exc) else (400, "invalid")
            raise ApiError(status, code, str(exc), {"content": [str(exc)]}) from None
        return Response(
            {
                "agent": data["agent"],
                "user": user_id,
                "filename": SNAPSHOT_FILE,
                "written": written,
                "content": snapshot_markdown(owner, scopes=list(MemoryScope.values)),
            },
            status=201,
        )

    @extend_schema(request=MemorySearchSerializer, responses={200: MemoryHitSerializer(many=True)})
    @action(detail=False, methods=["post"], url_path="search")
    def search(self, request: Request) -> Response:
        """The hybrid recall (M2) as the agent sees it for the caller."""
        body = MemorySearchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        agent = _agent(data["agent"])
        cfg = RecallSettings.from_settings()
        found = recall(self._owner(agent), data["query"], cfg=cfg, limit=data["limit"])
        hits = [
            {
                "id": c.id,
                "scope": c.scope,
                "category": c.category,
                "content": c.content,
                "score": round(c.score, 4),
                "vector": c.vector,
                "keyword": c.keyword,
            }
            for c in found.candidates
            if c.score >= (cfg.rrf_floor if cfg.method == "rrf" else cfg.floor)
        ][: data["limit"]]
        return Response(hits)


class MemoryInjectionFilter(django_filters.FilterSet):
    run = django_filters.NumberFilter(field_name="run_id")
    session = django_filters.UUIDFilter(field_name="session_id")

    class Meta:
        model = MemoryInjection
        fields = ["run", "session"]


class MemoryInjectionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """What recall put into each turn's prompt (member rule: a member's own chats)."""

    serializer_class = MemoryInjectionSerializer
    filterset_class = MemoryInjectionFilter

    def scoped_queryset(self) -> Any:
        return MemoryInjection.objects.visible_to(self.principal.caller).order_by("-id")
