"""Admin pages for memory (A2): entries (search; filter by scope, category and agent;
search by user; edit, delete, re-embed) and the injection log (M6), which also shows
on each run's page.

Who sees which memory is ``agents.memory.access``: owners and admins every memory
of the tenant, a member their own and the shared ones, a viewer the shared ones;
only owners and admins change them (the admin's roles)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from agents.memory.access import memories_visible_to
from agents.memory.embedding import reembed_tenant, schedule_embedding
from agents.memory.store import MemoryError, _check_content
from agents.models import MemoryEntry, MemoryInjection, MemoryScope
from claw_platform.admin.scoped import MemberRuleMixin, TenantScopedAdmin, request_caller, tenant_users

MAX_USER_CHOICES = 200


class MemoryEntryForm(forms.ModelForm):
    """The store's checks (length, a scope's owner) as form errors, not database ones."""

    class Meta:
        model = MemoryEntry
        # The admin adds the others (agent and user need a tenant in context).
        fields = ["content"]

    def clean_content(self) -> str:
        try:
            return _check_content(self.cleaned_data.get("content") or "")
        except MemoryError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        scope = data.get("scope")
        if scope == MemoryScope.USER and not data.get("user"):
            self.add_error("user", "A personal (user) memory names its user.")
        if scope == MemoryScope.AGENT and not data.get("agent"):
            self.add_error("agent", "An agent memory names its agent.")
        return data


class MemoryUserFilter(admin.SimpleListFilter):
    """Whose personal memories (the tenant's members who have some)."""

    title = "user"
    parameter_name = "user"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        with_memories = model_admin.get_queryset(request).filter(user__isnull=False).values("user_id")
        users = tenant_users(request).filter(pk__in=with_memories).order_by("username")
        return [(str(u.pk), u.get_username()) for u in users[:MAX_USER_CHOICES]]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if value is None:
            return queryset
        return queryset.filter(user_id=int(value)) if value.isdigit() else queryset.none()


@admin.register(MemoryEntry)
class MemoryEntryAdmin(TenantScopedAdmin):
    form = MemoryEntryForm
    list_display = [
        "short_content",
        "scope",
        "category",
        "agent",
        "user",
        "has_vector",
        "embed_error",
        "updated_at",
    ]
    list_filter = ["scope", "category", "agent", MemoryUserFilter]
    search_fields = ["content", "user__username"]
    list_select_related = ["agent", "user"]
    fields = [
        "scope",
        "category",
        "agent",
        "user",
        "content",
        "embedder",
        "embedded_at",
        "embed_error",
        "archived_at",
        "archive_reason",
        "merged_from",
    ]
    readonly_fields = [
        "embedder",
        "embedded_at",
        "embed_error",
        "archived_at",
        "archive_reason",
        "merged_from",
    ]
    actions = ["reembed_selected", "reembed_tenant"]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset: QuerySet = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        caller = request_caller(request)
        if caller is None:
            return queryset.none()
        return queryset.filter(pk__in=memories_visible_to(caller).values("pk"))

    @admin.display(description="memory")
    def short_content(self, entry: MemoryEntry) -> str:
        return entry.content[:80] + ("…" if len(entry.content) > 80 else "")

    @admin.display(description="vector", boolean=True)
    def has_vector(self, entry: MemoryEntry) -> bool:
        return entry.embedding_dim is not None

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if "content" in form.changed_data:
            obj.embedding, obj.embedding_dim, obj.embedder, obj.embedded_at = None, None, "", None
        super().save_model(request, obj, form, change)
        if "content" in form.changed_data:
            schedule_embedding([obj.pk])

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        if request.method == "GET":
            rows = self.get_queryset(request)
            total = rows.count()
            pending = rows.filter(embedding__isnull=True).count()
            failing = rows.filter(embedding__isnull=True).exclude(embed_error="").count()
            if pending:
                note = f"Embedding: {total - pending:,} of {total:,} memories have a vector"
                note += f"; {failing:,} failed (see embed error), retried every minute." if failing else "."
                self.message_user(request, note, messages.WARNING if failing else messages.INFO)
        return super().changelist_view(request, extra_context)

    @admin.action(description="Re-embed the selected memories")
    def reembed_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        if not self.has_change_permission(request):
            self.message_user(request, "Only owners and admins can re-embed memories.", messages.ERROR)
            return
        ids = list(queryset.values_list("pk", flat=True))
        MemoryEntry._base_manager.filter(pk__in=ids).update(
            embedding=None, embedding_dim=None, embedder="", embedded_at=None, embed_error=""
        )
        schedule_embedding(ids)
        self.message_user(request, f"{len(ids)} memories will be embedded again in the background.")

    @admin.action(description="Re-embed every memory of this tenant")
    def reembed_tenant(self, request: HttpRequest, queryset: QuerySet) -> None:
        tenant = getattr(request, "tenant", None)
        if tenant is None or not self.has_change_permission(request):
            self.message_user(
                request, "Only a tenant's owners and admins can re-embed its memories.", messages.ERROR
            )
            return
        count = reembed_tenant(tenant.pk)
        self.message_user(request, f"{count} memories will be embedded again; the list shows the progress.")


@admin.register(MemoryInjection)
class MemoryInjectionAdmin(MemberRuleMixin, TenantScopedAdmin):
    list_display = ["created_at", "session", "run", "method", "selected_count", "tokens", "is_group"]
    list_filter = ["method", "is_group"]
    search_fields = ["query"]
    fields = (
        "session",
        "run",
        "query",
        "method",
        "candidates",
        "selected",
        "tokens",
        "is_group",
        "created_at",
    )
    readonly_fields = fields

    @admin.display(description="selected")
    def selected_count(self, log: MemoryInjection) -> int:
        return len(log.selected)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class MemoryInjectionInline(admin.TabularInline):
    """On a run's page: what recall put into its prompt."""

    model = MemoryInjection
    extra = 0
    fields = ("query", "method", "candidates", "selected", "tokens", "is_group")
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
