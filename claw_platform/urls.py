from __future__ import annotations

from django.contrib import admin
from django.urls import path

from claw_platform.ops import views as ops_views

urlpatterns = [
    path("healthz", ops_views.healthz, name="healthz"),
    path("readyz", ops_views.readyz, name="readyz"),
    path("admin/", admin.site.urls),
]
