"""The admin site: open to tenant members by role, not to Django's is_staff flag."""

from __future__ import annotations

from functools import wraps
from typing import Any

from django import forms
from django.contrib.admin import AdminSite, ModelAdmin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.http import HttpRequest, HttpResponse

from claw_platform.admin.secrets import with_secret_fields_hidden
from claw_platform.signin.pages import SignInThrottleFormMixin, answer_lockout
from claw_platform.tenancy.context import all_tenants, keep_scope_while_streaming
from claw_platform.tenancy.lookup import active_membership


class TenantAdminAuthenticationForm(SignInThrottleFormMixin, AdminAuthenticationForm):
    """Lets in superusers and anyone with a membership of an active tenant."""

    def confirm_login_allowed(self, user: Any) -> None:
        if not user.is_active:
            raise forms.ValidationError(self.error_messages["inactive"], code="inactive")
        if not (user.is_superuser or active_membership(user) is not None):
            raise forms.ValidationError(
                self.error_messages["invalid_login"],
                code="invalid_login",
                params={"username": self.username_field.verbose_name},
            )


class ClawAdminSite(AdminSite):
    site_header = "Claw Platform"
    site_title = "Claw Platform admin"
    index_title = "Configuration"
    login_form = TenantAdminAuthenticationForm

    def register(self, model_or_iterable: Any, admin_class: Any = None, **options: Any) -> None:
        # Every model's admin, ours or a library's, shows secret fields only as
        # "set" / "not set" (claw_platform.admin.secrets).
        admin_class = with_secret_fields_hidden(admin_class or ModelAdmin)
        super().register(model_or_iterable, admin_class, **options)

    def each_context(self, request: HttpRequest) -> dict[str, Any]:
        from channels_app.web.banners import banners_for

        context = super().each_context(request)
        # Budget thresholds crossed and runaway routines paused (agents.budgets).
        context["owner_banners"] = banners_for(request)
        return context

    def login(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        # A lock-out is answered 429 with Retry-After (claw_platform.signin).
        return answer_lockout(request, super().login(request, extra_context))  # type: ignore[no-any-return]

    def has_permission(self, request: HttpRequest) -> bool:
        user = request.user
        if not (user.is_active and user.is_authenticated):
            return False
        return bool(user.is_superuser or getattr(request, "membership", None))

    def admin_view(self, view: Any, cacheable: bool = False) -> Any:
        inner = super().admin_view(view, cacheable)

        @wraps(inner)
        def scoped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            # Superusers operate the whole platform: their admin pages are unscoped.
            # Everyone else stays inside the tenant the middleware put in context.
            if request.user.is_authenticated and request.user.is_superuser:
                with all_tenants():
                    response = inner(request, *args, **kwargs)
                    # A TemplateResponse renders after the view returns: render it
                    # here, while the page's queries may still see every tenant.
                    if callable(getattr(response, "render", None)) and not response.is_rendered:
                        response.render()
                    return keep_scope_while_streaming(response)  # an export streams after this
            return inner(request, *args, **kwargs)

        return scoped
