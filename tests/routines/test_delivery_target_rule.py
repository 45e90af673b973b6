"""Whose chats a routine's output may be sent to through the agent's bots: owners
and admins name any chat; a member only a chat they talk to the agent in (one they
wrote from, or their linked account's), so a bot is no way for a member to post to
groups or people they do not reach through it. The API refuses naming
``deliver_target``; the chat tool likewise (tests/tools/test_schedule_tools_surface.py)."""

from __future__ import annotations

import pytest

from agents.actions.conversation import do_create_session
from agents.models import Routine
from channels_app.models import ChannelConversation
from tests.api.conftest import client_for, make_person_key
from tests.chat_platforms.conftest import link, make_channel

pytestmark = pytest.mark.django_db(transaction=True)


def body(ts, channel, target: str) -> dict:  # type: ignore[no-untyped-def]
    return {
        "agent": ts.agent.slug,
        "prompt": "Post the digest",
        "trigger": "interval",
        "interval_seconds": 600,
        "deliver_channel": channel.pk,
        "deliver_target": target,
    }


def test_a_member_delivers_only_to_their_own_chats_an_admin_anywhere(tenant_a):
    ts = tenant_a
    channel = make_channel(ts, "telegram", bot_token="123:t", signing_secret="s")
    member = client_for(make_person_key(ts, ts.member, "read", "write"))

    refused = member.post("/api/v1/routines/", body(ts, channel, "-100"), format="json")
    assert refused.status_code == 400, refused.content
    assert "deliver_target" in refused.json()["error"]["fields"]
    assert not Routine._base_manager.filter(deliver_target="-100").exists()

    # A group the member has written to the agent from is theirs to deliver to.
    session = do_create_session(ts.agent, user=ts.member, channel="telegram")
    ChannelConversation._base_manager.create(
        tenant=ts.tenant, session=session, channel=channel, chat_id="-100", sender_id="77", is_group=True
    )
    created = member.post("/api/v1/routines/", body(ts, channel, "-100"), format="json")
    assert created.status_code == 201, created.content

    # Their linked account's chat too; another chat, by PATCH, is refused.
    link(channel, "4242", ts.member)
    url = f"/api/v1/routines/{created.json()['id']}/"
    assert member.patch(url, {"deliver_target": "4242"}, format="json").status_code == 200
    moved = member.patch(url, {"deliver_target": "-999"}, format="json")
    assert moved.status_code == 400, moved.content
    assert "deliver_target" in moved.json()["error"]["fields"]
    assert Routine._base_manager.get(pk=created.json()["id"]).deliver_target == "4242"

    admin = client_for(make_person_key(ts, ts.admin, "read", "write"))
    anywhere = admin.post("/api/v1/routines/", body(ts, channel, "-999"), format="json")
    assert anywhere.status_code == 201, anywhere.content
