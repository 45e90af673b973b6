"""Issue 21, defect 3: members reach each other's chats through the REST API.

One rule (claw_platform.tenancy.member_rule): members see their own sessions and what
hangs off them; owners, admins and viewers see the tenant's; viewers act in none. A
key acts as the member who made it, with that member's current role; a key no person
made acts for the tenant. Each test takes M2 (a member) to M1's chat, with M2's login
cookie and with M2's key, and finds nothing there (404, as for a missing chat)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.models import ApprovalRequest, ApprovalStatus, Message, Run, RunStatus, Session
from claw_platform.api.actions.keys import do_issue_pairing_code, do_pair_device
from claw_platform.tenancy.models import Membership, Role
from tests.api.conftest import client_for, login_client, make_key, make_person_key

pytestmark = pytest.mark.django_db(transaction=True)


def m2_clients(chats: Any) -> dict[str, Any]:
    """M2 by login cookie and by a key M2 made (write scope: as much as a member gets)."""
    return {
        "cookie": login_client(chats.m2),
        "key": client_for(make_person_key(chats.tenant_set, chats.m2, "write")),
    }


def content(response: Any) -> bytes:
    return b"".join(response) if getattr(response, "streaming", False) else response.content


@pytest.mark.parametrize("way", ["cookie", "key"])
def test_a_member_lists_only_their_own_chats_runs_approvals_and_usage(member_chats, way):
    client = m2_clients(member_chats)[way]
    sessions = client.get("/api/v1/sessions/").json()["results"]
    assert {s["id"] for s in sessions} == {str(member_chats.own_session.pk)}
    for path in ("/api/v1/runs/", "/api/v1/approvals/", "/api/v1/approvals/?status=pending"):
        response = client.get(path)
        assert response.status_code == 200
        assert response.json()["results"] == [], path
    usage = client.get("/api/v1/usage/?group_by=user,model").json()["results"]
    assert [(row["user"], row["model"]) for row in usage] == [(member_chats.m2.username, "m2-model")]
    by_external = client.get(f"/api/v1/runs/?session={member_chats.session.pk}").json()["results"]
    assert by_external == []


@pytest.mark.parametrize("way", ["cookie", "key"])
def test_a_member_cannot_read_another_members_chat(member_chats, way):
    client = m2_clients(member_chats)[way]
    chat, run, approval = member_chats.session.pk, member_chats.run.pk, member_chats.approval.pk
    for path in (
        f"/api/v1/sessions/{chat}/",
        f"/api/v1/sessions/{chat}/messages/",
        f"/api/v1/runs/{run}/",
        f"/api/v1/runs/{run}/events/?after=0",
        f"/api/v1/approvals/{approval}/",
    ):
        response = client.get(path)
        assert response.status_code == 404, (path, response.status_code)
        assert response.json()["error"]["code"] == "not_found"
        for marker in member_chats.markers:
            assert marker.encode() not in response.content


@pytest.mark.parametrize("way", ["cookie", "key"])
def test_a_member_cannot_post_undo_approve_cancel_or_delete_in_another_members_chat(member_chats, way):
    client = m2_clients(member_chats)[way]
    chat, run, approval = member_chats.session.pk, member_chats.run.pk, member_chats.approval.pk
    runs_before = Run.objects.unscoped().filter(session_id=chat).count()
    messages_before = Message.objects.unscoped().filter(session_id=chat).count()
    for method, path, body in (
        ("POST", f"/api/v1/sessions/{chat}/messages/", {"text": "hijack", "mode": "async"}),
        ("POST", f"/api/v1/sessions/{chat}/messages/", {"text": "approve", "mode": "async"}),
        ("POST", f"/api/v1/sessions/{chat}/messages/", {"text": "/stop"}),
        ("POST", f"/api/v1/sessions/{chat}/undo/", None),
        ("POST", f"/api/v1/sessions/{chat}/redo/", None),
        ("POST", f"/api/v1/approvals/{approval}/approve/", {"reason": "sure"}),
        ("POST", f"/api/v1/approvals/{approval}/deny/", {"reason": "no"}),
        ("POST", f"/api/v1/runs/{run}/cancel/", None),
        ("DELETE", f"/api/v1/sessions/{chat}/", None),
    ):
        response = client.generic(
            method, path, json.dumps(body) if body is not None else "", content_type="application/json"
        )
        assert response.status_code == 404, (method, path, response.status_code, response.content[:200])
    assert Session.objects.unscoped().filter(pk=chat).exists()
    assert Run.objects.unscoped().filter(session_id=chat).count() == runs_before
    assert Message.objects.unscoped().filter(session_id=chat).count() == messages_before
    assert ApprovalRequest.objects.unscoped().get(pk=approval).status == ApprovalStatus.PENDING
    assert Run.objects.unscoped().get(pk=run).status == RunStatus.AWAITING_APPROVAL


@pytest.mark.parametrize("way", ["cookie", "key"])
def test_the_event_stream_carries_only_the_members_own_chats(member_chats, way):
    m2 = m2_clients(member_chats)[way]
    stream = content(m2.get("/api/v1/events/?after=0&timeout=1")).decode()
    assert "run.queued" not in stream  # M1's run is the tenant's only event so far
    for marker in member_chats.markers:
        assert marker not in stream
    m1 = login_client(member_chats.m1)
    assert "please wipe the M1 logs" in content(m1.get("/api/v1/events/?after=0&timeout=1")).decode()
    owner = login_client(member_chats.tenant_set.owner)
    assert "please wipe the M1 logs" in content(owner.get("/api/v1/events/?after=0&timeout=1")).decode()


def test_owners_admins_and_viewers_see_the_tenants_chats_and_viewers_act_in_none(member_chats):
    ts = member_chats.tenant_set
    chat = member_chats.session.pk
    for user in (ts.owner, ts.admin, ts.viewer):
        for client in (login_client(user), client_for(make_person_key(ts, user, "admin"))):
            ids = {s["id"] for s in client.get("/api/v1/sessions/?page_size=100").json()["results"]}
            assert str(chat) in ids, user.username
            assert client.get(f"/api/v1/sessions/{chat}/messages/").status_code == 200
    for viewer in (login_client(ts.viewer), client_for(make_person_key(ts, ts.viewer, "admin"))):
        response = viewer.post(f"/api/v1/sessions/{chat}/messages/", {"text": "hi"}, format="json")
        assert response.status_code == 403
        response = viewer.post(f"/api/v1/approvals/{member_chats.approval.pk}/approve/", {}, format="json")
        assert response.status_code == 403
    assert (
        ApprovalRequest.objects.unscoped().get(pk=member_chats.approval.pk).status == ApprovalStatus.PENDING
    )
    owner_key = client_for(make_person_key(ts, ts.owner, "write"))
    response = owner_key.post(f"/api/v1/approvals/{member_chats.approval.pk}/deny/", {}, format="json")
    assert response.status_code == 200, response.content


def test_a_member_acts_in_their_own_chat_by_key(member_chats):
    m1_key = client_for(make_person_key(member_chats.tenant_set, member_chats.m1, "write"))
    response = m1_key.post(f"/api/v1/approvals/{member_chats.approval.pk}/approve/", {}, format="json")
    assert response.status_code == 200, response.content
    assert (
        ApprovalRequest.objects.unscoped().get(pk=member_chats.approval.pk).status == ApprovalStatus.APPROVED
    )


def test_a_keys_scopes_are_cut_to_its_creators_current_role(member_chats):
    ts = member_chats.tenant_set
    key = make_person_key(ts, ts.admin, "admin")
    client = client_for(key)
    assert client.get("/api/v1/audit-events/").status_code == 200
    assert str(member_chats.session.pk) in client.get("/api/v1/sessions/").content.decode()
    membership = Membership.objects.unscoped().get(tenant=ts.tenant, user=ts.admin)
    membership.role = Role.MEMBER
    membership.save()  # as the admin's Members page does
    assert client.get("/api/v1/audit-events/").status_code == 403
    assert str(member_chats.session.pk) not in client.get("/api/v1/sessions/").content.decode()
    membership.delete()
    response = client.get("/api/v1/sessions/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"


def test_a_key_stops_working_while_its_creator_is_deactivated(member_chats):
    ts = member_chats.tenant_set
    client = client_for(make_person_key(ts, member_chats.m2, "write"))
    assert client.get("/api/v1/sessions/").status_code == 200
    member_chats.m2.is_active = False
    member_chats.m2.save()
    assert client.get("/api/v1/sessions/").status_code == 401
    member_chats.m2.is_active = True
    member_chats.m2.save()
    assert client.get("/api/v1/sessions/").status_code == 200


def test_an_operators_key_sees_the_tenants_chats(member_chats):
    client = client_for(make_key(member_chats.tenant_set, "write"))
    assert str(member_chats.session.pk) in client.get("/api/v1/sessions/").content.decode()


def test_a_paired_key_acts_as_the_person_who_issued_the_code(member_chats):
    ts = member_chats.tenant_set
    # The code is issued through the API with a key an admin made who is now a member.
    admin_key = client_for(make_person_key(ts, ts.admin, "admin"))
    code = admin_key.post("/api/v1/pairing-codes/", {"name": "phone", "scopes": ["write"]}, format="json")
    assert code.status_code == 201, code.content
    membership = Membership.objects.unscoped().get(tenant=ts.tenant, user=ts.admin)
    membership.role = Role.MEMBER
    membership.save()
    # From an address of its own: other tests lock theirs out on purpose.
    paired = client_for().post(
        "/api/v1/pair/", {"code": code.json()["code"]}, format="json", REMOTE_ADDR="10.21.0.7"
    )
    assert paired.status_code == 200, paired.content
    phone = client_for(paired.json()["token"])
    assert str(member_chats.session.pk) not in phone.get("/api/v1/sessions/").content.decode()
    assert phone.get(f"/api/v1/sessions/{member_chats.session.pk}/").status_code == 404
    # A code the operator issued (no person) makes a key for the tenant.
    _pairing, operator_code = do_issue_pairing_code(
        ts.tenant, name="kiosk", scopes=["read"], acting_user=None
    )
    kiosk, token = do_pair_device(operator_code)
    assert kiosk.created_by_id is None
    assert str(member_chats.session.pk) in client_for(token).get("/api/v1/sessions/").content.decode()


def test_members_naming_the_same_outside_session_get_their_own(member_chats):
    ts = member_chats.tenant_set
    m1 = client_for(make_person_key(ts, member_chats.m1, "write"))
    m2 = client_for(make_person_key(ts, member_chats.m2, "write"))
    first = m1.post(
        "/api/v1/sessions/", {"agent": "assistant", "external_key": "ticket-7"}, format="json"
    ).json()
    response = m2.post("/api/v1/sessions/", {"agent": "assistant", "external_key": "ticket-7"}, format="json")
    assert response.status_code == 409
    assert first["id"] not in response.content.decode()
    for client in (m1, m2):
        client.post(
            "/api/v1/hooks/assistant/",
            {"message": "hello", "session_key": "shared", "mode": "async"},
            format="json",
        )
    hooked = Session.objects.unscoped().filter(tenant=ts.tenant, channel="webhook")
    assert sorted(s.user_id for s in hooked) == sorted([member_chats.m1.pk, member_chats.m2.pk])
