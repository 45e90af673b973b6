"""E16 for webhook callers (issue 25, item 4): a hook may say its conversation is a
group's; that session then keeps the agent's MEMORY.md and personal memories out of
the prompt, and a session_key's session, once a group's, stays one."""

from __future__ import annotations

import pytest

from agents.models import MemoryEntry, MemoryInjection, Run, Session
from tests.api.conftest import body_of, client_for, inline_runs, make_person_key
from tests.fakes.fake_llm import Turn

__all__ = ["inline_runs"]  # the fixture, for this module's tests

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_group_hook_keeps_personal_memory_out(live_agent, fake_llm, inline_runs):
    ts = live_agent
    MemoryEntry.objects.unscoped().create(
        tenant=ts.tenant,
        scope="user",
        user=ts.member,
        agent=ts.agent,
        content="The member's door code is 4321",
    )
    fake_llm.default_reply = Turn(text="ok")
    client = client_for(make_person_key(ts, ts.member, "write"))
    url = "/api/v1/hooks/assistant/"

    group = client.post(
        url, {"message": "@assistant what is the door code?", "is_group": True}, format="json"
    )
    assert group.status_code == 200, group.content
    reply = body_of(group)
    assert reply["response"] == "ok", (reply["run"]["status"], reply["run"]["error"])
    run = Run.objects.unscoped().filter(tenant=ts.tenant).latest("id")
    assert Session.objects.unscoped().get(pk=run.session_id).is_group
    log = MemoryInjection.objects.unscoped().get(run=run)
    assert log.is_group
    assert "4321" not in fake_llm.requests[-1].json["messages"][0]["content"]

    # The same thread named by its key: once a group's, false does not turn it back.
    keyed = {"message": "@assistant door code?", "session_key": "room-7", "is_group": True}
    assert body_of(client.post(url, keyed, format="json"))["response"] == "ok"
    assert body_of(client.post(url, {**keyed, "is_group": False}, format="json"))["response"] == "ok"
    session = Session.objects.unscoped().get(pk=Run.objects.unscoped().latest("id").session_id)
    assert session.is_group
    assert "4321" not in fake_llm.requests[-1].json["messages"][0]["content"]

    # A one-to-one hook of the same person does recall it.
    assert body_of(client.post(url, {"message": "what is my door code?"}, format="json"))["response"] == "ok"
    assert "4321" in fake_llm.requests[-1].json["messages"][0]["content"]
    bad = client.post(url, {"message": "x", "is_group": "maybe"}, format="json")
    assert bad.status_code == 400
    assert "is_group" in bad.json()["error"]["fields"]
