"""Linking a platform account to a member by a one-time code: generated on the web
chat's Connected accounts page, sent to the bot as ``/link CODE`` (over the fake
Telegram), single use, tenant-bound, never stored in clear, and brute force locked out."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from agents.models import Run
from channels_app.actions.linking import MAX_FAILURES
from channels_app.models import ChannelLink, ChannelLinkCode, InboundUpdate
from tests.chat_platforms.conftest import link, make_channel
from tests.chat_platforms.test_telegram import SECRET, final_texts, post, update
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.fixtures.tenants import PASSWORD

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def telegram(live_agent: Any, fake_telegram: Any) -> Any:
    channel = make_channel(live_agent, "telegram", bot_token="123:telegram-token", signing_secret=SECRET)
    link(channel, "42", live_agent.member)
    return channel


def signed_in(user: Any) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def new_code(user: Any) -> str:
    response = signed_in(user).post(reverse("chat:new_link_code"))
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    found = re.search(r'id="link-code">([A-Z0-9-]+)<', response.content.decode())
    assert found
    return found.group(1)


def test_a_member_links_and_unlinks_their_account_with_a_one_time_code(
    telegram, fake_telegram, fake_llm, inline_runs, live_agent
):
    code = new_code(live_agent.admin)
    assert not ChannelLinkCode.objects.unscoped().filter(code_hash__contains=code).exists()
    post(telegram, update(f"/link {code}", sender=77))
    fake_telegram.wait_for(
        lambda f: any(t.startswith("Linked: you talk to this bot as") for t in final_texts(f))
    )
    assert (
        ChannelLink.objects.unscoped().get(channel=telegram, platform_user_id="77").user == live_agent.admin
    )
    assert InboundUpdate.objects.unscoped().get(sender_id="77").text == "/link [code]"

    post(telegram, update(f"/link {code}", sender=78))  # used once: gone
    fake_telegram.wait_for(lambda f: any("not valid" in t for t in final_texts(f)))
    assert not ChannelLink.objects.unscoped().filter(platform_user_id="78").exists()

    fake_llm.script(FakeTurn(text="Hello, admin."))
    post(telegram, update("who am I now?", sender=77))
    fake_telegram.wait_for(lambda f: "Hello, admin." in final_texts(f))
    assert Run.objects.unscoped().get(session__channel="telegram").session.user == live_agent.admin

    page = signed_in(live_agent.admin).get(reverse("chat:accounts")).content.decode()
    assert "telegram bot: 77" in page
    assert code not in page

    # Only the member whose link it is removes it.
    url = reverse(
        "chat:unlink_chat_account", args=[ChannelLink.objects.unscoped().get(platform_user_id="77").pk]
    )
    assert signed_in(live_agent.member).post(url).status_code == 404
    assert signed_in(live_agent.owner).post(url).status_code == 404
    assert ChannelLink.objects.unscoped().filter(platform_user_id="77").exists()
    assert signed_in(live_agent.admin).post(url).status_code == 302
    assert not ChannelLink.objects.unscoped().filter(platform_user_id="77").exists()


def test_a_code_links_only_within_its_own_tenant(telegram, fake_telegram, tenant_b, live_agent):
    foreign = new_code(tenant_b.member)
    post(telegram, update(f"/link {foreign}", sender=77))
    fake_telegram.wait_for(lambda f: any("not valid" in t for t in final_texts(f)))
    assert not ChannelLink.objects.unscoped().filter(platform_user_id="77").exists()
    # A viewer talks to no agent, so links nothing.
    assert signed_in(live_agent.viewer).post(reverse("chat:new_link_code")).status_code == 403
    assert not ChannelLinkCode.objects.unscoped().filter(user=live_agent.viewer).exists()


def test_wrong_codes_lock_the_sender_out_and_a_group_is_no_place_for_a_code(
    telegram, fake_telegram, live_agent
):
    for attempt in range(MAX_FAILURES):
        post(telegram, update(f"/link WRONG-{attempt:05d}", sender=77))
    code = new_code(live_agent.member)
    post(telegram, update(f"/link {code}", sender=77))
    fake_telegram.wait_for(lambda f: any("Too many wrong codes" in t for t in final_texts(f)))
    post(telegram, update(f"/link {code}", sender=79, group=True))
    fake_telegram.wait_for(lambda f: any("private chat" in t for t in final_texts(f)))
    assert not ChannelLink.objects.unscoped().filter(platform_user_id__in=["77", "79"]).exists()
