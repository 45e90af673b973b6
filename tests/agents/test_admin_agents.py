"""G1, G3, Z6: agents and their files edited in the admin, validated field by field,
every save a revision with a diff, and a one-click restore."""

from __future__ import annotations

from django.urls import reverse

from agents.actions.revisions import revision_diff
from agents.models import MAX_CONTEXT_FILE_CHARS, Agent, AgentFile, AgentRevision
from claw_platform.audit.models import AuditEvent
from tests.platform.test_admin_isolation import client_for


def agent_post(tenant_set, *, files=(), existing_files=(), **overrides):
    data = {
        "name": "Researcher",
        "slug": "researcher",
        "description": "",
        "enabled": "on",
        "agent_type": "open",
        "role": "main",
        "model": tenant_set.model.pk,
        "cheap_model": "",
        "temperature": "0.7",
        "max_iterations": "20",
        "time_budget_seconds": "600",
        "parallel_tools": "on",
        "busy_policy": "queue",
        "history_turn_limit": "",
        "compaction_message_threshold": "50",
        "compaction_trigger_ratio": "0.75",
        "compaction_keep_recent": "4",
        "input_guard_mode": "warn",
        "timezone": "UTC",
        "heartbeat_interval_minutes": "30",
        "heartbeat_notify": "linked",
    }
    data.update(overrides)
    rows = list(existing_files) + list(files)
    data.update(
        {
            "files-TOTAL_FORMS": str(len(rows)),
            "files-INITIAL_FORMS": str(len(existing_files)),
            "files-MIN_NUM_FORMS": "0",
            "files-MAX_NUM_FORMS": "1000",
        }
    )
    for i, row in enumerate(rows):
        for key, value in row.items():
            data[f"files-{i}-{key}"] = value
    # The tool, delegation and routing inlines, left empty here.
    for prefix in ("tool_config", "tool_settings", "delegations", "routing_rules"):
        data.update(
            {
                f"{prefix}-TOTAL_FORMS": "0",
                f"{prefix}-INITIAL_FORMS": "0",
                f"{prefix}-MIN_NUM_FORMS": "0",
                f"{prefix}-MAX_NUM_FORMS": "1000",
            }
        )
    return {k: v for k, v in data.items() if v is not None}


def add_agent(client, tenant_set, **kwargs):
    return client.post(reverse("admin:agents_agent_add"), agent_post(tenant_set, **kwargs))


def test_g1_an_admin_creates_an_agent_with_files_in_one_save(tenant_a):
    client = client_for(tenant_a.admin)
    response = add_agent(
        client,
        tenant_a,
        files=[{"name": "SOUL.md", "content": "Be precise."}, {"name": "TOOLS.md", "content": "Use search."}],
    )
    assert response.status_code == 302, response.context and response.context["adminform"].form.errors
    agent = Agent.objects.unscoped().get(tenant=tenant_a.tenant, slug="researcher")
    assert {f.name for f in AgentFile.objects.unscoped().filter(agent=agent)} == {"SOUL.md", "TOOLS.md"}
    assert (
        AgentFile.objects.unscoped().filter(agent=agent).values_list("tenant_id", flat=True).distinct().get()
        == tenant_a.tenant.pk
    )


def form_errors(response):
    errors = dict(response.context["adminform"].form.errors)
    for formset in response.context["inline_admin_formsets"]:
        for i, form_errors in enumerate(formset.formset.errors):
            errors.update({f"files-{i}-{k}": v for k, v in form_errors.items()})
    return errors


def test_bad_input_names_the_field_and_saves_nothing(tenant_a, tenant_b):
    client = client_for(tenant_a.admin)
    cases = {
        "slug": {"slug": "assistant"},  # duplicate within the tenant
        "max_iterations": {"max_iterations": "-3"},
        "time_budget_seconds": {"time_budget_seconds": "0"},
        "temperature": {"temperature": "5"},
        "timezone": {"timezone": "Mars/Olympus"},
        "model": {"model": tenant_b.model.pk},  # another tenant's model
        "heartbeat_interval_minutes": {"heartbeat_interval_minutes": "1"},  # under 5 minutes
        "heartbeat_active_end": {"heartbeat_active_start": "09:00"},  # one end of the active hours
    }
    agents_before = Agent.objects.unscoped().count()
    for field, override in cases.items():
        response = add_agent(client, tenant_a, **override)
        assert response.status_code == 200, field
        assert field in form_errors(response), (field, form_errors(response))
    assert "already exists" in str(form_errors(add_agent(client, tenant_a, slug="assistant"))["slug"])

    too_long = add_agent(
        client, tenant_a, files=[{"name": "SOUL.md", "content": "x" * (MAX_CONTEXT_FILE_CHARS + 1)}]
    )
    assert "files-0-content" in form_errors(too_long)
    unknown = add_agent(client, tenant_a, files=[{"name": "EVIL.md", "content": "x"}])
    assert "files-0-name" in form_errors(unknown)
    duplicate_files = add_agent(
        client, tenant_a, files=[{"name": "SOUL.md", "content": "1"}, {"name": "SOUL.md", "content": "2"}]
    )
    assert duplicate_files.status_code == 200
    assert Agent.objects.unscoped().count() == agents_before  # nothing half-saved
    assert not Agent.objects.unscoped().filter(slug="researcher").exists()


def test_the_same_slug_is_fine_in_another_tenant(tenant_a, tenant_b):
    response = add_agent(client_for(tenant_b.admin), tenant_b, slug="researcher")
    assert response.status_code == 302
    response = add_agent(client_for(tenant_a.admin), tenant_a, slug="researcher")
    assert response.status_code == 302


def test_provider_bad_input_names_the_field(tenant_a):
    from tests.platform.test_audit import provider_post

    client = client_for(tenant_a.admin)
    cases = {
        "base_url": {"base_url": "ftp://example.com"},
        "extra_headers": {"extra_headers": "{not json"},
        "body_overrides": {"body_overrides": "[1, 2]"},
        "timeout_seconds": {"timeout_seconds": "-1"},
        "name": {"name": "a-provider"},  # duplicate
    }
    for field, override in cases.items():
        response = client.post(reverse("admin:agents_llmprovider_add"), provider_post(**override))
        assert response.status_code == 200, field
        assert field in response.context["adminform"].form.errors, field
    headers = client.post(reverse("admin:agents_llmprovider_add"), provider_post(extra_headers='{"X-A": 1}'))
    assert "extra_headers" in headers.context["adminform"].form.errors


def test_z6_every_save_records_a_revision_with_a_diff(tenant_a):
    client = client_for(tenant_a.admin)
    agent = tenant_a.agent
    revisions = AgentRevision.objects.unscoped().filter(agent=agent)
    assert revisions.count() == 1  # created by the fixture's action
    soul = AgentFile.objects.unscoped().get(agent=agent, name="SOUL.md")
    existing = [{"id": soul.pk, "agent": agent.pk, "name": "SOUL.md", "content": "You are terse."}]
    response = client.post(
        reverse("admin:agents_agent_change", args=[agent.pk]),
        agent_post(
            tenant_a, slug="assistant", name="A assistant", max_iterations="12", existing_files=existing
        ),
    )
    assert response.status_code == 302, form_errors(response)
    latest = revisions.order_by("-number").first()
    assert latest.number == 2
    diff = revision_diff(latest)
    assert "-max_iterations: 20" in diff
    assert "+max_iterations: 12" in diff
    assert "+You are terse." in diff
    # Saving again with no change records nothing new.
    client.post(
        reverse("admin:agents_agent_change", args=[agent.pk]),
        agent_post(
            tenant_a, slug="assistant", name="A assistant", max_iterations="12", existing_files=existing
        ),
    )
    assert revisions.count() == 2
    page = client.get(reverse("admin:agents_agentrevision_change", args=[latest.pk]))
    assert "+max_iterations: 12" in page.content.decode()


def test_z6_restore_puts_settings_and_files_back_as_a_new_revision(tenant_a):
    client = client_for(tenant_a.admin)
    agent = tenant_a.agent
    soul = AgentFile.objects.unscoped().get(agent=agent, name="SOUL.md")
    client.post(
        reverse("admin:agents_agent_change", args=[agent.pk]),
        agent_post(
            tenant_a,
            slug="assistant",
            name="Renamed",
            existing_files=[
                {"id": soul.pk, "agent": agent.pk, "name": "SOUL.md", "content": "changed", "DELETE": "on"}
            ],
            files=[{"name": "USER.md", "content": "likes tea"}],
        ),
    )
    assert AgentFile.objects.unscoped().filter(agent=agent).get().name == "USER.md"
    first = AgentRevision.objects.unscoped().get(agent=agent, number=1)
    response = client.post(
        reverse("admin:agents_agentrevision_changelist"),
        {"action": "restore_revision", "_selected_action": [first.pk]},
    )
    assert response.status_code == 302
    agent.refresh_from_db()
    assert agent.name == "A assistant"
    files = {f.name: f.content for f in AgentFile.objects.unscoped().filter(agent=agent)}
    assert files == {"SOUL.md": "You are a's helpful assistant."}
    newest = AgentRevision.objects.unscoped().filter(agent=agent).order_by("-number").first()
    assert newest.number == 3
    assert newest.note == "Restored r1"
    assert (
        AuditEvent.objects.unscoped()
        .filter(action="agent.revision_restored", object_id=str(agent.pk))
        .exists()
    )


def test_a_viewer_cannot_restore(tenant_a):
    first = AgentRevision.objects.unscoped().get(agent=tenant_a.agent, number=1)
    response = client_for(tenant_a.viewer).post(
        reverse("admin:agents_agentrevision_changelist"),
        {"action": "restore_revision", "_selected_action": [first.pk]},
    )
    assert response.status_code in (200, 302, 403)
    assert AgentRevision.objects.unscoped().filter(agent=tenant_a.agent).count() == 1


def test_agent_changes_are_audited_with_file_diffs(tenant_a):
    client = client_for(tenant_a.admin)
    agent = tenant_a.agent
    soul = AgentFile.objects.unscoped().get(agent=agent, name="SOUL.md")
    client.post(
        reverse("admin:agents_agent_change", args=[agent.pk]),
        agent_post(
            tenant_a,
            slug="assistant",
            name="A assistant",
            existing_files=[{"id": soul.pk, "agent": agent.pk, "name": "SOUL.md", "content": "New soul."}],
        ),
    )
    event = AuditEvent.objects.unscoped().filter(action="agent.changed", object_id=str(agent.pk)).get()
    assert event.diff == {"file:SOUL.md": ["You are a's helpful assistant.", "New soul."]}
