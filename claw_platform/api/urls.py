"""Routes of the REST API (/api/v1/), its schema and docs, and the OpenAI-compatible
/v1/. tests/api/test_isolation.py calls every route of the project (this module's and
every other URL module's, and the WebSocket routes) with another tenant's and another
member's credentials: a new route needs a classification there."""

from __future__ import annotations

from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularSwaggerView
from rest_framework.routers import SimpleRouter

from agents.budgets.api import BudgetViewSet, KillSwitchViewSet, SpendSettingsView
from channels_app.inbound_view import inbound_view
from claw_platform.api.openai.views import chat_completions_view, models_view
from claw_platform.api.views.access import ApiKeyViewSet, PairingCodeView, PairView
from claw_platform.api.views.base import SchemaView
from claw_platform.api.views.config import AgentViewSet, ModelProfileViewSet, ProviderViewSet
from claw_platform.api.views.conversation import ApprovalViewSet, RunViewSet, SessionViewSet
from claw_platform.api.views.events import TenantEventsView
from claw_platform.api.views.hooks import HookView
from claw_platform.api.views.memory import MemoryInjectionViewSet, MemoryViewSet
from claw_platform.api.views.reports import AuditEventViewSet, AuditExportView, UsageView
from claw_platform.api.views.routines import RoutineViewSet

router = SimpleRouter()
router.register("agents", AgentViewSet, basename="agent")
router.register("providers", ProviderViewSet, basename="provider")
router.register("model-profiles", ModelProfileViewSet, basename="modelprofile")
router.register("sessions", SessionViewSet, basename="session")
router.register("runs", RunViewSet, basename="run")
router.register("approvals", ApprovalViewSet, basename="approval")
router.register("audit-events", AuditEventViewSet, basename="auditevent")
router.register("api-keys", ApiKeyViewSet, basename="apikey")
router.register("routines", RoutineViewSet, basename="routine")
router.register("budgets", BudgetViewSet, basename="budget")
router.register("kill-switches", KillSwitchViewSet, basename="killswitch")
router.register("memory", MemoryViewSet, basename="memory")
router.register("memory-injections", MemoryInjectionViewSet, basename="memoryinjection")

api_v1 = [
    *router.urls,
    path("usage/", UsageView.as_view(), name="usage"),
    path("audit/export/", AuditExportView.as_view(), name="audit-export"),
    path("spend-settings/", SpendSettingsView.as_view(), name="spend-settings"),
    path("events/", TenantEventsView.as_view(), name="events"),
    path("hooks/<slug:slug>/", HookView.as_view(), name="hook"),
    path("pairing-codes/", PairingCodeView.as_view(), name="pairing-codes"),
    path("pair/", PairView.as_view(), name="pair"),
    path("channels/<uuid:public_id>/inbound/", inbound_view, name="channel-inbound"),
]

urlpatterns = [
    path("api/v1/", include((api_v1, "api"), namespace="v1")),
    path("api/schema/", SchemaView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("v1/chat/completions", chat_completions_view, name="openai-chat-completions"),
    path("v1/models", models_view, name="openai-models"),
    re_path(r"^v1/models/(?P<slug>[-a-zA-Z0-9_]+)$", models_view, name="openai-model"),
]
