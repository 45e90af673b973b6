"""Bad input: a correctly signed update of any odd shape (not an object, fields of
the wrong type, lists where objects belong) is refused with a 4xx or acknowledged
and ignored, on every platform; never a 500 or a crash of the adapter. (Django's
test client raises the view's exception, so a crash fails the test with its trace.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from channels_app.models import InboundUpdate
from tests.chat_platforms import test_discord, test_slack, test_telegram, test_webhook_channel, test_whatsapp
from tests.chat_platforms.conftest import inbound_url
from tests.chat_platforms.test_discord import discord  # noqa: F401  (fixtures)
from tests.chat_platforms.test_slack import slack  # noqa: F401
from tests.chat_platforms.test_telegram import telegram  # noqa: F401
from tests.chat_platforms.test_webhook_channel import hook_channel  # noqa: F401
from tests.chat_platforms.test_whatsapp import whatsapp  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

SHAPES: list[Any] = [
    [],
    "text",
    5,
    None,
    {},
    {"update_id": "x", "message": "x"},
    {"update_id": 1, "message": {"chat": [], "from": 5, "text": {}}},
    {"update_id": 2, "message": {"chat": {"id": {}, "type": 5}, "from": {"id": []}, "text": ["a"]}},
    {"update_id": 3, "callback_query": {"data": 5, "message": "x", "from": None}},
    {"type": "url_verification", "challenge": []},
    {"type": "event_callback", "event": []},
    {
        "type": "event_callback",
        "event_id": 5,
        "event": {"type": "message", "channel": {}, "user": [], "text": 7},
    },
    {"type": "block_actions", "actions": "x"},
    {"object": "whatsapp_business_account", "entry": "x"},
    {"entry": [{"changes": [{"value": {"messages": [{"from": {}, "id": [], "type": "text", "text": []}]}}]}]},
    {"entry": [{"changes": "x"}]},
    {"type": 1.5},
    {"type": 3, "data": [], "message": 5},
    {"type": 3, "data": {"custom_id": 5}, "member": "x", "channel_id": {}},
    {"type": 2, "data": {"name": "ask", "options": "x"}, "channel_id": []},
    {"type": "message", "chat": [], "sender": {}, "text": 5, "id": None},
    {"type": "message", "chat": "c", "sender": "s", "text": "hi", "id": {"nested": True}, "thread": []},
]


def signed_senders() -> dict[str, Any]:
    return {
        "telegram": lambda channel, shape: test_telegram.post(channel, shape),
        "slack": lambda channel, shape: test_slack.post_json(channel, shape),
        "discord": lambda channel, shape: test_discord.interaction(shape),
        "whatsapp": lambda channel, shape: test_whatsapp.post(channel, shape),
        "webhook_channel": lambda channel, shape: test_webhook_channel.post(channel, shape),
    }


@pytest.mark.parametrize("kind", ["telegram", "slack", "discord", "whatsapp", "webhook_channel"])
def test_a_signed_update_of_any_shape_is_refused_or_ignored_never_a_crash(kind, request):
    channel = request.getfixturevalue({"webhook_channel": "hook_channel"}.get(kind, kind))
    send = signed_senders()[kind]
    for shape in SHAPES:
        response = send(channel, shape)
        assert response.status_code < 500, (kind, shape, response.content)
        if response.status_code >= 400:
            assert response.json()["error"]["code"], (kind, shape)
    # Not JSON at all, signed: a 4xx naming the problem.
    if kind == "telegram":
        answer = Client().post(
            inbound_url(channel),
            b"{not json",
            content_type="application/json",
            HTTP_X_TELEGRAM_BOT_API_SECRET_TOKEN=test_telegram.SECRET,
        )
        assert answer.status_code == 400
    if kind == "slack":
        assert test_slack.post(channel, b"{not json").status_code == 400
    assert all(isinstance(json.dumps(u.payload), str) for u in InboundUpdate.objects.unscoped().all())


def test_a_malformed_polled_update_is_skipped_and_the_rest_of_the_batch_kept(telegram):  # noqa: F811
    from channels_app.models import Channel
    from channels_app.polling import _store_batch

    Channel.objects.unscoped().filter(pk=telegram.pk).update(open_to_everyone=False)
    good = test_telegram.update("/help", sender=7)
    bad = {"update_id": good["update_id"] + 1000, "message": "not an object"}
    assert _store_batch(telegram.pk, [good, bad]) == bad["update_id"] + 1  # the offset moves past both
    assert list(InboundUpdate.objects.unscoped().filter(channel=telegram).values_list("text", flat=True)) == [
        "/help"
    ]
