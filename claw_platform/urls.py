from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from channels_app.web import banners
from channels_app.web.reports import usage_report
from claw_platform.observability import views as observability_views
from claw_platform.ops import views as ops_views

urlpatterns = [
    path("healthz", ops_views.healthz, name="healthz"),
    path("readyz", ops_views.readyz, name="readyz"),
    path("metrics", observability_views.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("chat/", include("channels_app.web.urls")),
    path("reports/usage/", usage_report, name="usage_report"),
    path("banners/<str:kind>/<int:pk>/dismiss/", banners.dismiss, name="dismiss_banner"),
    path("", include("claw_platform.api.urls")),
    path("", RedirectView.as_view(url="/chat/", permanent=False)),
]

# Under /api/ and /v1/ a missing route or a crash answers in the API's error shape.
handler404 = "claw_platform.api.errors.json_not_found"
handler500 = "claw_platform.api.errors.json_server_error"
