"""Admin for providers, model profiles, agents, their files and revisions."""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from agents.actions.revisions import (
    agent_snapshot,
    do_record_agent_revision,
    do_restore_agent_revision,
    flatten_snapshot,
    revision_diff,
)
from agents.actions.runs import do_cancel_run, do_decide_approval
from agents.memory.admin import MemoryInjectionInline
from agents.models import (
    FINISHED_RUN_STATUSES,
    Agent,
    AgentFile,
    AgentRevision,
    ApprovalRequest,
    ApprovalStatus,
    Attachment,
    LLMProvider,
    ModelProfile,
    Run,
    RunEvent,
    Session,
    UsageRecord,
)
from agents.providers.connection_check import check_provider_connection
from agents.team_admin import TEAM_INLINES
from claw_platform.admin.scoped import (
    MemberRuleMixin,
    TenantScopedAdmin,
    TenantScopedInline,
    can_edit,
    can_view,
)
from claw_platform.audit.actions import client_ip
from claw_platform.observability.models import Span
from claw_platform.observability.waterfall import render_waterfall
from claw_platform.tenancy.context import tenant_context
from tools_app.admin import AGENT_TOOL_INLINES
from tools_app.runtime.network import guard_for_tenant


class LLMProviderForm(forms.ModelForm):
    # The API key's input is write-only (claw_platform.secret_forms): blank keeps the
    # stored key, "remove" clears it.
    class Meta:
        model = LLMProvider
        fields = [
            "name",
            "kind",
            "base_url",
            "api_key",
            "extra_headers",
            "body_overrides",
            "timeout_seconds",
            "max_retries",
            "enabled",
        ]


@admin.register(LLMProvider)
class LLMProviderAdmin(TenantScopedAdmin):
    form = LLMProviderForm
    list_display = ["name", "kind", "base_url", "api_key", "enabled"]  # the key as set / not set
    list_filter = ["kind", "enabled"]
    search_fields = ["name", "base_url"]
    readonly_fields = ["connection"]

    def get_urls(self) -> list[Any]:
        test = path(
            "<path:object_id>/test-connection/",
            self.admin_site.admin_view(self.test_connection_view),
            name="agents_llmprovider_test_connection",
        )
        return [test, *super().get_urls()]

    @admin.display(description="Connection")
    def connection(self, obj: LLMProvider | None) -> str:
        if obj is None or obj.pk is None:
            return "Save the provider first, then test its connection."
        # Inside the page's own form (its CSRF token); tests the saved settings.
        return format_html(
            '<button type="submit" formaction="{}" formmethod="post" class="button" '
            'id="test-connection">Test connection</button>'
            '<div class="help">Asks the provider for its model list with the saved URL and key.</div>',
            reverse("admin:agents_llmprovider_test_connection", args=[obj.pk]),
        )

    def test_connection_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        provider = self.get_object(request, object_id)
        if provider is None:
            raise Http404("No such provider.")
        change = reverse("admin:agents_llmprovider_change", args=[provider.pk])
        if request.method != "POST":
            return HttpResponseRedirect(change)
        if not self.has_change_permission(request, provider):
            raise PermissionDenied
        with tenant_context(provider.tenant_id):
            guard = guard_for_tenant(provider.tenant_id)
        result = async_to_sync(check_provider_connection)(
            kind=provider.kind,
            base_url=provider.base_url,
            api_key=provider.api_key or "",
            extra_headers=dict(provider.extra_headers or {}),
            guard=guard,
        )
        self.message_user(request, result.message, messages.SUCCESS if result.ok else messages.ERROR)
        return HttpResponseRedirect(change)


@admin.register(ModelProfile)
class ModelProfileAdmin(TenantScopedAdmin):
    list_display = [
        "__str__",
        "provider",
        "model",
        "kind",
        "context_window",
        "input_price",
        "output_price",
        "supports_tools",
        "supports_vision",
    ]  # fits 1,280 px; the rest is on the profile's page
    list_filter = ["provider", "kind", "supports_tools", "supports_vision"]
    search_fields = ["model", "label"]
    autocomplete_fields = ["provider"]


class AgentFileFormSet(forms.BaseInlineFormSet):
    def clean(self) -> None:
        # The (agent, user, name) constraint treats an empty user as a value (NULLS
        # NOT DISTINCT); Django's formset check skips rows with a None, so check here.
        super().clean()
        seen: set[tuple[Any, str]] = set()
        for form in self.forms:
            data = getattr(form, "cleaned_data", None)
            if not data or data.get("DELETE") or not data.get("name"):
                continue
            key = (data.get("user"), data["name"])
            if key in seen:
                form.add_error("name", "This file is listed twice for the same user.")
            seen.add(key)


class AgentFileInline(TenantScopedInline):
    model = AgentFile
    formset = AgentFileFormSet
    fields = ["name", "user", "content"]

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        kwargs.setdefault("widgets", {})["content"] = forms.Textarea(attrs={"rows": 6, "cols": 90})
        return super().get_formset(request, obj, **kwargs)


@admin.register(Agent)
class AgentAdmin(TenantScopedAdmin):
    list_display = ["name", "slug", "role", "agent_type", "model", "enabled", "current_revision"]
    list_filter = ["role", "agent_type", "enabled"]
    search_fields = ["name", "slug", "description"]
    autocomplete_fields = ["model", "cheap_model"]
    inlines = [AgentFileInline, *AGENT_TOOL_INLINES, *TEAM_INLINES]
    fieldsets = [
        (None, {"fields": ["name", "slug", "description", "enabled", "agent_type", "role"]}),
        ("Model", {"fields": ["model", "cheap_model", "temperature", "show_thinking", "trace_verbose"]}),
        (
            "Limits",
            {
                "fields": [
                    "max_iterations",
                    "time_budget_seconds",
                    "parallel_tools",
                    "busy_policy",
                    "history_turn_limit",
                ]
            },
        ),
        (
            "Compaction",
            {
                "fields": [
                    "compaction_message_threshold",
                    "compaction_trigger_ratio",
                    "compaction_keep_recent",
                ]
            },
        ),
        ("Safety and locale", {"fields": ["input_guard_mode", "timezone"]}),
        (
            "Heartbeat",
            {
                "fields": [
                    "heartbeat_enabled",
                    "heartbeat_interval_minutes",
                    "heartbeat_active_start",
                    "heartbeat_active_end",
                    "heartbeat_notify",
                ],
                "description": "A periodic check of HEARTBEAT.md, run by the routine scheduler as a "
                "routine of kind heartbeat. Defaults: off, every 30 minutes, all day.",
            },
        ),
        ("Run middleware", {"fields": ["auto_compact_tokens", "stop_after_tokens"]}),
        ("Tool health", {"fields": ["flagged_tools"]}),
    ]
    readonly_fields = ["flagged_tools"]

    @admin.display(description="Flagged tools (self-repair)")
    def flagged_tools(self, obj: Agent) -> str:
        """The mark on the agent's tools: those flagged for failing in a row (cleared
        in Tools > Tool health)."""
        from tools_app.models import ToolHealth

        if obj.pk is None:
            return "-"
        names = list(
            ToolHealth._base_manager.filter(agent_id=obj.pk, flagged_at__isnull=False).values_list(
                "tool", flat=True
            )
        )
        return ", ".join(names) if names else "none"

    def audit_snapshot(self, obj: Any) -> dict[str, Any]:
        return flatten_snapshot(agent_snapshot(obj))

    @admin.display(description="Revision")
    def current_revision(self, obj: Agent) -> str:
        latest = obj.revisions.order_by("-number").values_list("number", flat=True).first()
        return f"r{latest}" if latest else "-"

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        do_record_agent_revision(form.instance, acting_user=request.user)


@admin.register(AgentFile)
class AgentFileAdmin(TenantScopedAdmin):
    """Per-user context files are managed here too (the inline shows all of them)."""

    list_display = ["agent", "name", "user", "updated_at"]
    list_filter = ["name"]
    search_fields = ["agent__name", "content"]
    autocomplete_fields = ["agent"]
    fields = ["agent", "user", "name", "content"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        do_record_agent_revision(obj.agent, acting_user=request.user, note=f"{obj.name} saved")

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        agent = obj.agent
        super().delete_model(request, obj)
        do_record_agent_revision(agent, acting_user=request.user, note=f"{obj.name} deleted")


@admin.register(AgentRevision)
class AgentRevisionAdmin(TenantScopedAdmin):
    list_display = ["agent", "number", "note", "created_by", "created_at"]
    list_filter = ["agent"]
    readonly_fields = ["agent", "number", "note", "created_by", "created_at", "diff", "restore"]
    fields = list(readonly_fields)
    actions = ["restore_revision"]

    def get_urls(self) -> list[Any]:
        restore = path(
            "<path:object_id>/restore/",
            self.admin_site.admin_view(self.restore_view),
            name="agents_agentrevision_restore",
        )
        return [restore, *super().get_urls()]

    @admin.display(description="Restore")
    def restore(self, obj: AgentRevision) -> str:
        # Inside the page's own form (its CSRF token), posted to this revision's restore/.
        # An absolute URL: "restore/" relative to .../<id>/change/ would miss the route.
        return format_html(
            '<button type="submit" formaction="{}" formmethod="post" class="button" id="restore-revision">'
            "Restore the agent to r{}</button>",
            reverse("admin:agents_agentrevision_restore", args=[obj.pk]),
            obj.number,
        )

    def restore_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        revision = self.get_object(request, object_id)
        if revision is None:
            raise Http404("No such revision.")
        change = reverse("admin:agents_agentrevision_change", args=[revision.pk])
        if request.method != "POST":
            return HttpResponseRedirect(change)
        self.restore_revision(request, AgentRevision.objects.filter(pk=revision.pk))
        return HttpResponseRedirect(change)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_view(request)

    @admin.display(description="Changes from the previous revision")
    def diff(self, obj: AgentRevision) -> str:
        text = revision_diff(obj)
        if not text:
            return format_html('<pre style="white-space: pre-wrap">{}</pre>', "(first revision)")
        lines = format_html_join(
            "", "<span{}>{}</span>\n", ((_diff_style(line), line) for line in text.split("\n"))
        )
        return format_html('<pre class="revision-diff" style="white-space: pre-wrap">{}</pre>', lines)

    def get_actions(self, request: HttpRequest) -> Any:
        actions = super().get_actions(request)
        if not can_edit(request):
            actions.pop("restore_revision", None)
        return actions

    @admin.action(description="Restore the agent to the selected revision")
    def restore_revision(self, request: HttpRequest, queryset: QuerySet) -> None:
        if not can_edit(request):
            self.message_user(request, "You cannot change this tenant's agents.", messages.ERROR)
            return
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one revision to restore.", messages.ERROR)
            return
        revision = queryset.get()
        try:
            new = do_restore_agent_revision(revision, acting_user=request.user, ip=client_ip(request))
        except ValidationError as exc:
            self.message_user(request, "; ".join(exc.messages), messages.ERROR)
            return
        self.message_user(request, f"{revision.agent} restored to r{revision.number} (now r{new.number}).")


_DIFF_STYLES = {
    "+": ' class="diff-added" style="color: #1a7f37; background: rgba(46, 160, 67, 0.15)"',
    "-": ' class="diff-removed" style="color: #cf222e; background: rgba(248, 81, 73, 0.15)"',
    "@": ' class="diff-hunk" style="color: #6e7781"',
}


def _diff_style(line: str) -> Any:
    """A unified diff line's colour: added green, removed red, hunk headers grey."""
    if line.startswith(("+++", "---")):
        return mark_safe(' class="diff-file" style="font-weight: bold"')
    return mark_safe(_DIFF_STYLES.get(line[:1], ""))  # noqa: S308 -- constants only


class ReadOnlyTenantAdmin(TenantScopedAdmin):
    """Rows the product writes (conversations, usage): browsable, never edited here."""

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Session)
class SessionAdmin(MemberRuleMixin, ReadOnlyTenantAdmin):
    list_display = [
        "__str__",
        "agent",
        "user",
        "channel",
        "input_tokens",
        "output_tokens",
        "cost",
        "last_activity_at",
    ]
    list_filter = ["agent", "channel"]
    search_fields = ["title", "external_key"]
    list_select_related = ["agent", "user"]


@admin.register(Attachment)
class AttachmentAdmin(MemberRuleMixin, ReadOnlyTenantAdmin):
    list_display = ["name", "kind", "media_type", "size", "session", "uploaded_by", "created_at"]
    list_filter = ["kind"]
    exclude = ["data"]
    list_select_related = ["session", "uploaded_by"]


@admin.register(UsageRecord)
class UsageRecordAdmin(MemberRuleMixin, ReadOnlyTenantAdmin):
    list_display = [
        "created_at",
        "agent",
        "user",
        "provider",
        "model",
        "purpose",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cost",
        "latency_ms",
        "run",
        "api_key",
        "routine",
    ]
    list_filter = ["purpose", "provider", "model", ("created_at", admin.DateFieldListFilter)]
    date_hierarchy = "created_at"
    list_select_related = ["agent", "user", "run", "api_key", "routine"]


class WaitingFilter(admin.SimpleListFilter):
    """The approvals list opens on what waits for a person."""

    title = "status"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("pending", "Waiting"), ("decided", "Decided"), ("all", "All")]

    def choices(self, changelist: Any) -> Any:
        for value, label in self.lookup_choices:
            yield {
                "selected": (self.value() or "pending") == value,
                "query_string": changelist.get_query_string({self.parameter_name: value}),
                "display": label,
            }

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value() or "pending"
        if value == "pending":
            return queryset.filter(status=ApprovalStatus.PENDING)
        if value == "decided":
            return queryset.exclude(status=ApprovalStatus.PENDING)
        return queryset


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(MemberRuleMixin, ReadOnlyTenantAdmin):
    """Pending approvals (and the decided ones): approve or deny from the list."""

    list_display = ["tool_name", "status", "risk", "run", "arguments_short", "created_at", "decided_by"]
    list_filter = [WaitingFilter, "risk", "tool_name"]
    list_select_related = ["run", "decided_by"]
    actions = ["approve", "approve_always", "deny"]
    readonly_fields = ["arguments", "details", "request_reason"]

    @admin.display(description="Arguments")
    def arguments_short(self, approval: ApprovalRequest) -> str:
        text = json.dumps(approval.arguments, ensure_ascii=False)
        return text if len(text) <= 80 else text[:79] + "…"

    def _decide(self, request: HttpRequest, queryset: QuerySet, approved: bool, always: bool = False) -> None:
        count = 0
        try:
            for approval in queryset.filter(status=ApprovalStatus.PENDING):
                do_decide_approval(
                    approval, approved, acting_user=request.user, reason="decided in the admin", always=always
                )
                count += 1
        except PermissionDenied:
            self.message_user(request, "You cannot decide this tenant's tool calls.", messages.ERROR)
            return
        self.message_user(request, f"{'Approved' if approved else 'Denied'} {count} call(s).")

    @admin.action(description="Approve the selected calls")
    def approve(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._decide(request, queryset, True)

    @admin.action(description="Approve the selected calls, always (this session, these arguments)")
    def approve_always(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._decide(request, queryset, True, always=True)

    @admin.action(description="Deny the selected calls")
    def deny(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._decide(request, queryset, False)


class RunEventInline(admin.TabularInline):
    """On a run's page: its stored events in order -- tool calls with their input,
    results with their output and errors, approvals, the outcome."""

    model = RunEvent
    extra = 0
    fields = ("seq", "type", "summary", "created_at")
    readonly_fields = fields
    can_delete = False
    ordering = ("seq",)
    verbose_name = "event"

    @admin.display(description="What happened")
    def summary(self, event: RunEvent) -> str:
        return event_summary(event.type, event.payload)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Whoever may open the run (tenant and member rule) reads its events.
        return True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


EVENT_TEXT_CHARS = 400


def event_summary(kind: str, payload: Any) -> str:
    """One line of a run event for people: a tool call's name and arguments, a
    result's output or error, an approval's decision, a failure's message."""
    data = payload if isinstance(payload, dict) else {}
    if kind == "tool.call":
        text = f"{data.get('name', '?')}({json.dumps(data.get('arguments', {}), ensure_ascii=False)})"
    elif kind == "tool.result":
        failed = f"failed ({data.get('error_type') or 'error'}):" if data.get("is_error") else "ok:"
        text = f"{data.get('name', '?')} {failed} {data.get('preview', '')}".strip()
        if data.get("duration_ms") is not None:
            text += f" ({data['duration_ms']} ms)"
    elif kind == "approval_needed":
        text = "waiting for approval: " + ", ".join(str(c.get("name")) for c in data.get("calls", []))
    elif kind == "approval.decided":
        text = f"{data.get('status', '?')} by {data.get('by', '?')}" + (
            " (always)" if data.get("always") else ""
        )
    elif kind in {"run.failed", "run.cancelled"}:
        text = str(data.get("error") or data.get("reason") or "")
    else:
        text = json.dumps(data, ensure_ascii=False) if data else ""
    return text if len(text) <= EVENT_TEXT_CHARS else text[: EVENT_TEXT_CHARS - 1] + "…"


@admin.register(Run)
class RunAdmin(MemberRuleMixin, ReadOnlyTenantAdmin):
    list_display = [
        "__str__",
        "agent",
        "session",
        "status",
        "model_name",
        "model_route",
        "attempt",
        "lease_owner",
        "created_at",
        "finished_at",
    ]
    list_filter = ["status", "agent"]
    list_select_related = ["agent", "session"]
    actions = ["cancel_runs"]
    readonly_fields = ["trace"]

    @admin.display(description="Trace")
    def trace(self, run: Run) -> str:
        # The run is visible here, so are its spans (they hang off it).
        return render_waterfall(list(Span._base_manager.filter(run_id=run.pk, tenant_id=run.tenant_id)))

    inlines = [RunEventInline, MemoryInjectionInline]

    @admin.action(description="Cancel the selected runs")
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet) -> None:
        count = 0
        try:
            for run in queryset.exclude(status__in=FINISHED_RUN_STATUSES):
                do_cancel_run(run, acting_user=request.user)
                count += 1
        except PermissionDenied:
            self.message_user(request, "You cannot cancel this tenant's runs.", messages.ERROR)
            return
        self.message_user(request, f"Asked {count} run(s) to stop.")


# Routines' pages live with the routines (agents.routines.admin).
from agents.routines import admin as _routines_admin  # noqa: E402,F401
