"""Agent revisions (Z6): record on every save, diff, restore."""

from __future__ import annotations

import difflib
import json
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from agents.models import Agent, AgentFile, AgentRevision, ModelProfile
from claw_platform.audit.actions import diff_snapshots, field_json_value, record_audit_event
from claw_platform.secret_fields import audit_value, is_secret_field

# Fields that are bookkeeping, not configuration.
_NOT_CONFIG = {"id", "tenant", "created_at", "updated_at", *Agent.AUDIT_EXCLUDE}


def agent_snapshot(agent: Agent) -> dict[str, Any]:
    """The agent's configuration and context files, as JSON (a secret field only as
    set or not: revisions are shown to every member)."""
    settings_data: dict[str, Any] = {}
    for field in agent._meta.concrete_fields:
        if field.name in _NOT_CONFIG:
            continue
        if is_secret_field(field):
            settings_data[field.name] = audit_value(field.value_from_object(agent))
            continue
        settings_data[field.attname if field.is_relation else field.name] = field_json_value(field, agent)
    files = [
        {"name": f.name, "user_id": f.user_id, "content": f.content}
        for f in AgentFile._base_manager.filter(agent_id=agent.pk).order_by("user_id", "name")
    ]
    files.sort(key=lambda f: (f["user_id"] or 0, f["name"]))
    return {"settings": settings_data, "files": files}


@transaction.atomic
def do_record_agent_revision(agent: Agent, *, acting_user: Any, note: str = "") -> AgentRevision | None:
    """Record the agent's current state as a new revision, unless nothing changed."""
    # Row lock: two saves of one agent at once must not both take number N.
    Agent._base_manager.select_for_update().filter(pk=agent.pk).first()
    latest = AgentRevision._base_manager.filter(agent_id=agent.pk).order_by("-number").first()
    state = agent_snapshot(agent)
    if latest is not None and latest.snapshot == state:
        return None
    return AgentRevision._base_manager.create(
        tenant_id=agent.tenant_id,
        agent_id=agent.pk,
        number=(latest.number + 1) if latest else 1,
        snapshot=state,
        note=note[:200],
        created_by=acting_user if getattr(acting_user, "pk", None) else None,
    )


def revision_diff(revision: AgentRevision) -> str:
    """Unified diff from the revision before this one (empty text for the first)."""
    previous = (
        AgentRevision._base_manager.filter(agent_id=revision.agent_id, number__lt=revision.number)
        .order_by("-number")
        .first()
    )
    before = _diff_lines(previous.snapshot) if previous else []
    after = _diff_lines(revision.snapshot)
    label_before = f"r{previous.number}" if previous else "(none)"
    return "\n".join(
        difflib.unified_diff(before, after, fromfile=label_before, tofile=f"r{revision.number}", lineterm="")
    )


def _diff_lines(state: dict[str, Any]) -> list[str]:
    lines = [f"{k}: {json.dumps(v)}" for k, v in sorted(state.get("settings", {}).items())]
    for f in state.get("files", []):
        owner = f" (user {f['user_id']})" if f.get("user_id") else ""
        lines.append(f"--- file {f['name']}{owner} ---")
        lines.extend(f["content"].splitlines() or [""])
    return lines


@transaction.atomic
def do_restore_agent_revision(
    revision: AgentRevision, *, acting_user: Any, ip: str | None = None
) -> AgentRevision:
    """Put the agent back as it was at ``revision``; the restore is itself a revision."""
    agent = Agent._base_manager.select_for_update().get(pk=revision.agent_id)
    before = agent_snapshot(agent)
    settings_data = revision.snapshot.get("settings", {})
    for field in agent._meta.concrete_fields:
        key = field.attname if field.is_relation else field.name
        if field.name in _NOT_CONFIG or key not in settings_data or is_secret_field(field):
            continue  # a secret is not in the revision: the current one stays
        setattr(agent, key, field.to_python(settings_data[key]))
    for key in ("model_id", "cheap_model_id"):
        profile_id = getattr(agent, key)
        if (
            profile_id
            and not ModelProfile._base_manager.filter(pk=profile_id, tenant_id=agent.tenant_id).exists()
        ):
            raise ValidationError(f"Revision r{revision.number} uses a model that no longer exists.")
    agent.full_clean()
    agent.save()
    wanted = {(f["user_id"], f["name"]): f["content"] for f in revision.snapshot.get("files", [])}
    existing = {(f.user_id, f.name): f for f in AgentFile._base_manager.filter(agent_id=agent.pk)}
    for existing_key, stale in existing.items():
        if existing_key not in wanted:
            stale.delete()
    for (user_id, name), content in wanted.items():
        row = existing.get((user_id, name))
        if row is None:
            AgentFile._base_manager.create(
                tenant_id=agent.tenant_id, agent_id=agent.pk, user_id=user_id, name=name, content=content
            )
        elif row.content != content:
            row.content = content
            row.save(update_fields=["content", "updated_at"])
    new_revision = do_record_agent_revision(
        agent, acting_user=acting_user, note=f"Restored r{revision.number}"
    )
    after = agent_snapshot(agent)
    record_audit_event(
        action="agent.revision_restored",
        actor=acting_user,
        obj=agent,
        diff={
            "restored_revision": revision.number,
            **diff_snapshots(flatten_snapshot(before), flatten_snapshot(after)),
        },
        ip=ip,
    )
    return new_revision or revision


def flatten_snapshot(state: dict[str, Any]) -> dict[str, Any]:
    """One level of keys (settings and file:NAME), for audit diffs."""
    flat = dict(state.get("settings", {}))
    for f in state.get("files", []):
        flat[f"file:{f['name']}" + (f":user{f['user_id']}" if f.get("user_id") else "")] = f["content"]
    return flat
