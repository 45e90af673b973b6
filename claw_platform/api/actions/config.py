"""Changing and deleting agents, providers and model profiles through the API; each
change is audited with a diff, and an agent change is also a revision (Z6)."""

from __future__ import annotations

from typing import Any

from django.db import models, transaction
from django.db.models import ProtectedError

from agents.actions.revisions import do_record_agent_revision
from agents.models import Agent, LLMProvider, ModelProfile
from claw_platform.api.errors import ApiError
from claw_platform.audit.actions import diff_snapshots, record_audit_event, snapshot


def _update(
    obj: models.Model, changes: dict[str, Any], *, acting_user: Any, ip: str | None
) -> dict[str, Any]:
    before = snapshot(obj)
    for name, value in changes.items():
        setattr(obj, name, value)
    obj.full_clean()
    obj.save()
    diff = diff_snapshots(before, snapshot(obj))
    if diff:
        record_audit_event(
            action=f"{obj._meta.model_name}.changed", actor=acting_user, obj=obj, diff=diff, ip=ip
        )
    return diff


def _delete(obj: models.Model, *, acting_user: Any, ip: str | None) -> None:
    record_audit_event(
        action=f"{obj._meta.model_name}.deleted",
        actor=acting_user,
        obj=obj,
        diff=diff_snapshots(snapshot(obj), None),
        ip=ip,
    )
    try:
        with transaction.atomic():
            obj.delete()
    except ProtectedError:
        raise ApiError(
            409, "in_use", f"This {obj._meta.verbose_name} is still in use; change what uses it first."
        ) from None


@transaction.atomic
def do_update_agent(
    agent: Agent, changes: dict[str, Any], *, acting_user: Any, ip: str | None = None
) -> Agent:
    if _update(agent, changes, acting_user=acting_user, ip=ip):
        do_record_agent_revision(agent, acting_user=acting_user, note="Changed through the API")
    return agent


@transaction.atomic
def do_delete_agent(agent: Agent, *, acting_user: Any, ip: str | None = None) -> None:
    _delete(agent, acting_user=acting_user, ip=ip)


@transaction.atomic
def do_update_provider(
    provider: LLMProvider, changes: dict[str, Any], *, acting_user: Any, ip: str | None = None
) -> LLMProvider:
    _update(provider, changes, acting_user=acting_user, ip=ip)
    return provider


@transaction.atomic
def do_delete_provider(provider: LLMProvider, *, acting_user: Any, ip: str | None = None) -> None:
    _delete(provider, acting_user=acting_user, ip=ip)


@transaction.atomic
def do_update_model_profile(
    profile: ModelProfile, changes: dict[str, Any], *, acting_user: Any, ip: str | None = None
) -> ModelProfile:
    _update(profile, changes, acting_user=acting_user, ip=ip)
    return profile


@transaction.atomic
def do_delete_model_profile(profile: ModelProfile, *, acting_user: Any, ip: str | None = None) -> None:
    _delete(profile, acting_user=acting_user, ip=ip)
