"""X1: the admin shows a user only their tenant's objects, by every path; roles decide
who may change what; another tenant's object URL is a 404."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agents.actions.routines import Trigger, do_create_routine
from agents.budgets.models import Budget, BudgetAlert, KillSwitch, RunawayPause, SpendSettings
from agents.models import (
    Agent,
    AgentFile,
    AgentRevision,
    ApprovalRequest,
    Attachment,
    LLMProvider,
    MemoryEntry,
    MemoryInjection,
    ModelProfile,
    Routine,
    RoutineRun,
    Run,
    Session,
    UsageRecord,
)
from channels_app.models import (
    Channel,
    ChannelConversation,
    ChannelLink,
    ChannelLinkCode,
    InboundUpdate,
    OutboundReply,
)
from claw_platform.api.models import AgentWebhook, ApiKey, PairingCode
from claw_platform.audit.models import AuditEvent
from claw_platform.tenancy.models import Membership, TenantOwned
from tests.fixtures.tenants import PASSWORD, make_api_rows
from tools_app.models import AllowedHost, Hook, HttpTool, McpServer, Skill, ToolApprovalGrant, ToolHealth

TENANT_MODELS = [m for m in admin.site._registry if issubclass(m, TenantOwned)]


@pytest.fixture(autouse=True)
def _api_rows(tenant_a, tenant_b) -> None:
    """A row in each API table too, for both tenants."""
    for prefix, tenant_set in (("a", tenant_a), ("b", tenant_b)):
        make_api_rows(tenant_set.tenant, prefix, tenant_set.owner, tenant_set.agent)
        make_routine_rows(tenant_set, prefix, tenant_set.member)
        ToolHealth.objects.unscoped().create(
            tenant=tenant_set.tenant, agent=tenant_set.agent, tool=f"{prefix}-tool", consecutive_failures=1
        )
        make_approval_rows(tenant_set, prefix)


def make_approval_rows(tenant_set, prefix: str) -> None:
    """A call waiting for approval in the member's chat, and an "always" grant."""
    run = Run.objects.unscoped().filter(tenant=tenant_set.tenant).order_by("id").first()
    ApprovalRequest.objects.unscoped().create(
        tenant=tenant_set.tenant, run=run, call_id=f"{prefix}-call", tool_name="bash", arguments={"cmd": "ls"}
    )
    ToolApprovalGrant.objects.unscoped().create(
        tenant=tenant_set.tenant,
        session_id=run.session_id,
        tool_name="bash",
        arguments_digest=f"{prefix}-digest",
        arguments={"cmd": "ls"},
    )


def make_routine_rows(tenant_set, prefix: str, user) -> Routine:
    routine = do_create_routine(
        tenant_id=tenant_set.tenant.pk,
        agent_id=tenant_set.agent.pk,
        user_id=user.pk,
        session_id=None,
        name=f"{prefix}-routine-{user.username}",
        prompt="nightly report",
        trigger=Trigger("cron", cron="0 3 * * *"),
        acting_user=None,
        count_cap=False,
    )
    RoutineRun.objects.unscoped().create(
        tenant=tenant_set.tenant, routine=routine, status="ok", output="fine"
    )
    RunawayPause.objects.unscoped().create(
        tenant=tenant_set.tenant, routine=routine, kind="repeats", reason="it kept saying the same"
    )
    return routine


def client_for(user) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def objects_of(tenant_set) -> dict[type, object]:
    """One object of every tenant-owned admin model, belonging to ``tenant_set``."""
    qs = {
        LLMProvider: LLMProvider.objects.unscoped(),
        ModelProfile: ModelProfile.objects.unscoped(),
        Agent: Agent.objects.unscoped(),
        AgentFile: AgentFile.objects.unscoped(),
        AgentRevision: AgentRevision.objects.unscoped(),
        Membership: Membership.objects.unscoped(),
        Session: Session.objects.unscoped(),
        UsageRecord: UsageRecord.objects.unscoped(),
        Run: Run.objects.unscoped(),
        Hook: Hook.objects.unscoped(),
        McpServer: McpServer.objects.unscoped(),
        HttpTool: HttpTool.objects.unscoped(),
        Skill: Skill.objects.unscoped(),
        AllowedHost: AllowedHost.objects.unscoped(),
        ApiKey: ApiKey.objects.unscoped(),
        PairingCode: PairingCode.objects.unscoped(),
        AgentWebhook: AgentWebhook.objects.unscoped(),
        Routine: Routine.objects.unscoped(),
        RoutineRun: RoutineRun.objects.unscoped(),
        Budget: Budget.objects.unscoped(),
        BudgetAlert: BudgetAlert.objects.unscoped(),
        KillSwitch: KillSwitch.objects.unscoped(),
        SpendSettings: SpendSettings.objects.unscoped(),
        RunawayPause: RunawayPause.objects.unscoped(),
        Channel: Channel.objects.unscoped(),
        ChannelLink: ChannelLink.objects.unscoped(),
        ChannelLinkCode: ChannelLinkCode.objects.unscoped(),
        ChannelConversation: ChannelConversation.objects.unscoped(),
        InboundUpdate: InboundUpdate.objects.unscoped(),
        OutboundReply: OutboundReply.objects.unscoped(),
        MemoryEntry: MemoryEntry.objects.unscoped(),
        MemoryInjection: MemoryInjection.objects.unscoped(),
        ToolHealth: ToolHealth.objects.unscoped(),
        Attachment: Attachment.objects.unscoped(),
        ApprovalRequest: ApprovalRequest.objects.unscoped(),
        ToolApprovalGrant: ToolApprovalGrant.objects.unscoped(),
    }
    return {model: q.filter(tenant=tenant_set.tenant).first() for model, q in qs.items()}


def admin_url(obj, view: str) -> str:
    opts = obj._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_{view}", args=[obj.pk])


def test_every_tenant_owned_admin_model_is_covered_here():
    # A new tenant-owned model registered in the admin must be added to objects_of().
    assert set(TENANT_MODELS) == {
        LLMProvider,
        ModelProfile,
        Agent,
        AgentFile,
        AgentRevision,
        Membership,
        Session,
        UsageRecord,
        Run,
        Hook,
        McpServer,
        HttpTool,
        Skill,
        AllowedHost,
        ApiKey,
        PairingCode,
        AgentWebhook,
        Routine,
        RoutineRun,
        Budget,
        BudgetAlert,
        KillSwitch,
        SpendSettings,
        RunawayPause,
        Channel,
        ChannelLink,
        ChannelLinkCode,
        ChannelConversation,
        InboundUpdate,
        OutboundReply,
        MemoryEntry,
        MemoryInjection,
        ToolHealth,
        Attachment,
        ApprovalRequest,
        ToolApprovalGrant,
    }


@pytest.mark.parametrize("model", TENANT_MODELS, ids=lambda m: m.__name__)
def test_change_lists_show_only_the_users_tenant(model, tenant_a, tenant_b):
    client = client_for(tenant_a.owner)
    opts = model._meta
    response = client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"))
    assert response.status_code == 200
    shown = list(response.context["cl"].result_list)
    assert shown, "tenant A's own rows are listed"
    assert all(obj.tenant_id == tenant_a.tenant.pk for obj in shown)


@pytest.mark.parametrize("model", TENANT_MODELS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("view", ["change", "delete", "history"])
def test_another_tenants_object_url_is_a_404(model, view, tenant_a, tenant_b):
    foreign = objects_of(tenant_b)[model]
    for user in (tenant_a.owner, tenant_a.viewer):
        response = client_for(user).get(admin_url(foreign, view))
        assert response.status_code == 404, (user.username, view)


def test_a_foreign_object_cannot_be_changed_by_post(tenant_a, tenant_b):
    client = client_for(tenant_a.owner)
    response = client.post(admin_url(tenant_b.provider, "change"), {"name": "hijacked"})
    assert response.status_code == 404
    assert LLMProvider.objects.unscoped().get(pk=tenant_b.provider.pk).name == "b-provider"
    response = client.post(admin_url(tenant_b.agent, "delete"), {"post": "yes"})
    assert response.status_code == 404
    assert Agent.objects.unscoped().filter(pk=tenant_b.agent.pk).exists()


def test_bulk_delete_action_cannot_reach_foreign_ids(tenant_a, tenant_b):
    client = client_for(tenant_a.owner)
    client.post(
        reverse("admin:agents_agent_changelist"),
        {"action": "delete_selected", "_selected_action": [tenant_b.agent.pk], "post": "yes"},
    )
    assert Agent.objects.unscoped().filter(pk=tenant_b.agent.pk).exists()


def test_autocomplete_offers_only_the_tenants_objects(tenant_a, tenant_b):
    client = client_for(tenant_a.owner)
    response = client.get(
        reverse("admin:autocomplete"),
        {"term": "", "app_label": "agents", "model_name": "agent", "field_name": "model"},
    )
    assert response.status_code == 200
    ids = {int(r["id"]) for r in response.json()["results"]}
    assert ids == {tenant_a.model.pk}


def test_foreign_key_choices_offer_only_the_tenants_objects(tenant_a, tenant_b, outsider):
    client = client_for(tenant_a.owner)
    response = client.get(reverse("admin:agents_agentfile_add"))
    form = response.context["adminform"].form
    agents = set(form.fields["agent"].queryset.values_list("pk", flat=True))
    users = set(form.fields["user"].queryset.values_list("username", flat=True))
    assert agents == {tenant_a.agent.pk}
    assert users == {"a_owner", "a_admin", "a_member", "a_viewer"}


def test_it_refuses_a_file_for_a_foreign_agent_submitted_by_id(tenant_a, tenant_b):
    client = client_for(tenant_a.owner)
    response = client.post(
        reverse("admin:agents_agentfile_add"),
        {"agent": tenant_b.agent.pk, "name": "USER.md", "content": "injected"},
    )
    assert response.status_code == 200
    assert "agent" in response.context["adminform"].form.errors
    assert not AgentFile.objects.unscoped().filter(content="injected").exists()


def test_viewer_can_read_but_not_change(tenant_a):
    client = client_for(tenant_a.viewer)
    assert client.get(reverse("admin:agents_agent_changelist")).status_code == 200
    assert client.get(admin_url(tenant_a.agent, "change")).status_code == 200  # read-only view
    assert client.get(reverse("admin:agents_agent_add")).status_code == 403
    response = client.post(admin_url(tenant_a.agent, "change"), {"name": "renamed"})
    assert response.status_code == 403
    assert Agent.objects.unscoped().get(pk=tenant_a.agent.pk).name == "A assistant"
    assert client.post(admin_url(tenant_a.agent, "delete"), {"post": "yes"}).status_code == 403


def test_member_can_read_but_not_change(tenant_a):
    client = client_for(tenant_a.member)
    assert client.get(reverse("admin:agents_agent_changelist")).status_code == 200
    assert client.get(reverse("admin:agents_llmprovider_add")).status_code == 403


def test_outsider_gets_no_admin(tenant_a, outsider):
    client = Client()
    response = client.post(reverse("admin:login"), {"username": outsider.username, "password": PASSWORD})
    assert response.status_code == 200  # the login form again, with an error
    assert response.context["form"].errors
    response = client.get(reverse("admin:agents_agent_changelist"))
    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]


def test_member_of_a_tenant_can_sign_in_to_the_admin(tenant_a):
    client = Client()
    response = client.post(
        reverse("admin:login"), {"username": "a_admin", "password": PASSWORD, "next": "/admin/"}
    )
    assert response.status_code == 302
    assert client.get("/admin/").status_code == 200


def test_audit_list_shows_only_the_tenants_events(tenant_a, tenant_b):
    client = client_for(tenant_a.owner)
    response = client.get(reverse("admin:audit_auditevent_changelist"))
    assert response.status_code == 200
    events = list(response.context["cl"].result_list)
    assert events
    assert {e.tenant_id for e in events} == {tenant_a.tenant.pk}
    foreign = AuditEvent.objects.unscoped().filter(tenant=tenant_b.tenant).first()
    assert client.get(reverse("admin:audit_auditevent_change", args=[foreign.pk])).status_code == 404


def test_tenant_page_shows_only_the_users_tenant(tenant_a, tenant_b):
    client = client_for(tenant_a.owner)
    response = client.get(reverse("admin:tenancy_tenant_changelist"))
    assert [t.pk for t in response.context["cl"].result_list] == [tenant_a.tenant.pk]
    assert client.get(reverse("admin:tenancy_tenant_change", args=[tenant_b.tenant.pk])).status_code == 404


# ------------------------------------------------------------ the member rule

MEMBER_RULE_MODELS = [m for m in TENANT_MODELS if hasattr(m, "MEMBER_OWNER")]


def m1_object(model, chats):
    """M1's row of ``model`` (its chat, a run of it, its usage row, its routine, the
    chat-platform conversation and update it would have come from)."""
    if model in (Routine, RoutineRun, RunawayPause):
        routine = Routine.objects.unscoped().filter(user=chats.m1).first() or make_routine_rows(
            chats.tenant_set, "m1", chats.m1
        )
        if model is RunawayPause:
            return RunawayPause.objects.unscoped().filter(routine=routine).first()
        return routine if model is Routine else RoutineRun.objects.unscoped().filter(routine=routine).first()
    if model in (ChannelConversation, InboundUpdate, OutboundReply, ChannelLinkCode):
        return _m1_channel_row(model, chats)
    return {
        Session: chats.session,
        Run: chats.run,
        UsageRecord: UsageRecord.objects.unscoped().filter(session=chats.session).first(),
        Budget: Budget.objects.unscoped().filter(user=chats.m1).first(),
        BudgetAlert: BudgetAlert.objects.unscoped().filter(budget__user=chats.m1).first(),
        MemoryInjection: MemoryInjection.objects.unscoped().filter(session=chats.session).first(),
        Attachment: Attachment.objects.unscoped().filter(session=chats.session).first(),
        ApprovalRequest: chats.approval,
        ToolApprovalGrant: ToolApprovalGrant.objects.unscoped().get_or_create(
            tenant=chats.session.tenant,
            session=chats.session,
            tool_name="bash",
            arguments_digest="m1-digest",
        )[0],
    }[model]


def _m1_channel_row(model, chats):
    session = chats.session
    channel = Channel.objects.unscoped().filter(tenant_id=session.tenant_id).first()
    fields = {"tenant_id": session.tenant_id, "channel": channel, "chat_id": "m1", "sender_id": "m1"}
    if model is ChannelConversation:
        return ChannelConversation.objects.unscoped().create(session=session, **fields)
    if model is OutboundReply:
        del fields["sender_id"]
        return OutboundReply.objects.unscoped().create(
            run=chats.run, parts=["m1's reply"], next_attempt_at=timezone.now(), **fields
        )
    if model is ChannelLinkCode:
        return ChannelLinkCode.objects.unscoped().create(
            tenant_id=session.tenant_id,
            user=chats.m1,
            code_hash="m1".ljust(64, "0"),
            expires_at=timezone.now(),
        )
    return InboundUpdate.objects.unscoped().create(session=session, platform_id="m1-update", **fields)


def test_the_session_hung_admin_models_are_these():
    # A new admin model that hangs off sessions needs a row in m1_object().
    assert set(MEMBER_RULE_MODELS) == {
        Session,
        Run,
        UsageRecord,
        Routine,
        RoutineRun,
        Budget,
        BudgetAlert,
        RunawayPause,
        ChannelConversation,
        InboundUpdate,
        OutboundReply,
        ChannelLinkCode,
        MemoryInjection,
        Attachment,
        ApprovalRequest,
        ToolApprovalGrant,
    }


@pytest.mark.parametrize("model", MEMBER_RULE_MODELS, ids=lambda m: m.__name__)
def test_a_member_sees_only_their_own_chats_rows(model, member_chats):
    opts = model._meta
    changelist = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    mine = m1_object(model, member_chats)
    m2 = client_for(member_chats.m2)
    shown = list(m2.get(changelist).context["cl"].result_list)
    assert mine.pk not in {obj.pk for obj in shown}
    assert all(model.MEMBER_OWNER and _owner(obj) == member_chats.m2.pk for obj in shown)
    for view in ("change", "history", "delete"):
        assert m2.get(admin_url(mine, view)).status_code == 404, view
    ts = member_chats.tenant_set
    for user in (ts.owner, ts.admin, ts.viewer, member_chats.m1):
        rows = client_for(user).get(changelist).context["cl"].result_list
        assert mine.pk in {obj.pk for obj in rows}, user.username
        assert client_for(user).get(admin_url(mine, "change")).status_code == 200, user.username


def _owner(obj):
    value = obj
    for part in obj.MEMBER_OWNER.split("__"):
        value = getattr(value, part)
    return getattr(value, "pk", value)


def test_a_member_does_not_read_the_audit_trail(member_chats):
    # It names every chat's runs and approvals (with their reasons).
    audit = reverse("admin:audit_auditevent_changelist")
    assert client_for(member_chats.m2).get(audit).status_code == 403
    for user in (member_chats.tenant_set.owner, member_chats.tenant_set.viewer):
        assert client_for(user).get(audit).status_code == 200


def test_a_member_cannot_cancel_another_members_run_with_the_bulk_action(member_chats):
    client_for(member_chats.m2).post(
        reverse("admin:agents_run_changelist"),
        {"action": "cancel_runs", "_selected_action": [member_chats.run.pk]},
    )
    assert Run.objects.unscoped().get(pk=member_chats.run.pk).status == "awaiting_approval"
