"""The member rule itself (claw_platform.tenancy.member_rule): who sees which session,
who acts in it, and that every model hanging off a session can be filtered by it."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.db import models

from agents.models import ApprovalRequest, Run, RunEvent, Session, Turn, UsageRecord
from claw_platform.tenancy.member_rule import Caller, visible_to
from claw_platform.tenancy.models import Role, TenantOwned

# Tenant-owned models that reference a session but are not shown to people as a
# chat's part, with why (they have rules of their own).
NOT_MEMBER_OWNED = {
    "agents.MemoryEntry": "memory has its own scopes (agent, user, session) and is reached only by the agent's tools",
}
SESSION_MODELS = ("agents.Session", "agents.Run", "agents.Turn", "agents.Thread")


def test_every_model_that_hangs_off_a_session_names_its_owner():
    """A new model that references a session (or a run, turn or thread) must say
    whose it is (MEMBER_OWNER), or be listed above with a reason."""
    anchors = {apps.get_model(label) for label in SESSION_MODELS}
    missing = []
    for model in apps.get_models():
        if not issubclass(model, TenantOwned) or model._meta.label in NOT_MEMBER_OWNED:
            continue
        references = any(
            isinstance(f, models.ForeignKey | models.OneToOneField) and f.related_model in anchors
            for f in model._meta.get_fields()
            if f.concrete
        )
        if (references or model is Session) and not isinstance(getattr(model, "MEMBER_OWNER", None), str):
            missing.append(model._meta.label)
    assert not missing, f"declare MEMBER_OWNER on {missing}"


def test_every_declared_path_leads_to_a_user():
    for model in apps.get_models():
        path = getattr(model, "MEMBER_OWNER", None)
        if path is None:
            continue
        if path == "user_id" and model._meta.label == "budgets.UsageDay":
            # The usage rollup keeps plain ids (no foreign keys, so history outlives a
            # deleted user): its column holds the user's own id.
            assert model._meta.get_field("user_id").get_internal_type() == "BigIntegerField"
            continue
        current = model
        for part in path.split("__"):
            field = current._meta.get_field(part)
            current = field.related_model
        assert current._meta.label == "auth.User", (model, path)


@pytest.mark.parametrize(
    ("role", "own", "other", "acts_own", "acts_other"),
    [
        (Role.OWNER, True, True, True, True),
        (Role.ADMIN, True, True, True, True),
        (Role.MEMBER, True, False, True, False),
        (Role.VIEWER, True, True, False, False),
        (None, True, True, True, True),  # the operator's key, system code
    ],
)
def test_who_sees_and_acts(role, own, other, acts_own, acts_other):
    caller = Caller(tenant_id=1, user_id=10, role=role)
    assert (caller.sees_session_of(10), caller.sees_session_of(11)) == (own, other)
    assert (caller.acts_in_session_of(10), caller.acts_in_session_of(11)) == (acts_own, acts_other)
    assert not Caller(1, 10, Role.MEMBER).sees_session_of(None)  # a chat nobody owns


def test_visible_to_cuts_any_session_hung_queryset(member_chats, tenant_b):
    chats = member_chats
    tenant_id = chats.tenant_set.tenant.pk
    m2 = Caller(tenant_id, chats.m2.pk, Role.MEMBER)
    m1 = Caller(tenant_id, chats.m1.pk, Role.MEMBER)
    viewer = Caller(tenant_id, chats.tenant_set.viewer.pk, Role.VIEWER)
    for model in (Session, Run, RunEvent, Turn, ApprovalRequest, UsageRecord):
        everything = model.objects.unscoped().all()
        assert not visible_to(everything, m2).filter(**{model.MEMBER_OWNER: chats.m1.pk}).exists(), model
        assert visible_to(everything, m1).exists(), model
        seen = set(visible_to(everything, viewer).values_list("tenant_id", flat=True))
        assert seen == {tenant_id}, model  # never another tenant's, even unscoped
    assert list(visible_to(Session.objects.unscoped().all(), m2)) == [chats.own_session]
    with pytest.raises(TypeError, match="MEMBER_OWNER"):
        visible_to(models.QuerySet(model=apps.get_model("agents.Agent")), m2)
