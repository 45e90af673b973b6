"""UIDVALIDITY: the IMAP poller keeps the mailbox's UIDVALIDITY with its last UID.
When the mailbox is rebuilt (new UIDVALIDITY, UIDs renumbered below the old
offset) it reads the mailbox again: old mail is a duplicate by Message-ID (or by
its bytes when it has none) and is not answered again, and new mail is not lost."""

from __future__ import annotations

import asyncio

import pytest

from channels_app.models import Channel, InboundUpdate
from channels_app.polling import poll_mailbox_once
from tests.chat_platforms.test_email import mail, mailbox  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def poll(channel: Channel) -> Channel:
    assert asyncio.run(poll_mailbox_once(channel.pk, "worker-1"))
    return Channel.objects.unscoped().get(pk=channel.pk)


def stored(channel: Channel) -> list[str]:
    return list(
        InboundUpdate.objects.unscoped().filter(channel=channel).order_by("pk").values_list("text", flat=True)
    )


def test_a_rebuilt_mailbox_is_read_again_without_replays_or_losses(mailbox, fake_mail):  # noqa: F811
    # Unsigned mail on a channel that refuses it: each mail is stored and refused, no
    # run, no reply.
    Channel.objects.unscoped().filter(pk=mailbox.pk).update(unverified_mail="refuse")
    sender = "bob@example.test"
    nameless = mail("one, without a Message-ID", sender=sender, signed_by=None)
    del nameless["Message-ID"]
    for message in (
        nameless,
        mail("two", sender=sender, signed_by=None),
        mail("three", sender=sender, signed_by=None),
    ):
        fake_mail.deliver(message)
    channel = poll(mailbox)
    assert (channel.poll_offset, channel.poll_uidvalidity) == (3, fake_mail.uidvalidity)
    assert stored(channel) == ["one, without a Message-ID", "two", "three"]

    fake_mail.rebuild(keep=2)  # "three" gone, "one" and "two" renumbered 1 and 2
    assert (
        fake_mail.deliver(mail("four, after the rebuild", sender=sender, signed_by=None)) == 3
    )  # below the old offset + 1
    channel = poll(channel)
    assert stored(channel) == ["one, without a Message-ID", "two", "three", "four, after the rebuild"]
    assert (channel.poll_offset, channel.poll_uidvalidity) == (3, fake_mail.uidvalidity)

    fake_mail.deliver(mail("five", sender=sender, signed_by=None))
    channel = poll(channel)
    assert stored(channel)[-1] == "five"
    assert len(stored(channel)) == 5
    assert channel.poll_offset == 4

    # A rebuilt mailbox that is empty starts again at UID 0.
    fake_mail.rebuild(keep=0)
    channel = poll(channel)
    assert (channel.poll_offset, channel.poll_uidvalidity) == (0, fake_mail.uidvalidity)
    fake_mail.deliver(mail("six", sender=sender, signed_by=None))
    assert stored(poll(channel))[-1] == "six"
