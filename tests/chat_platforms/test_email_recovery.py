"""A mail stored but never dispatched (the worker died after storing it) is answered
once by the recovery sweep, like the other platforms: its stored text and the sender
verdict reached when it came (never checked against DNS again) give it back, and its
attachments are read again from the mailbox — the same mail by UIDVALIDITY, UID and
hash, else named as not read. What is stored is storable (no NUL bytes)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from email.message import EmailMessage
from typing import Any

import pytest
from django.utils import timezone

from agents.models import Attachment, Run
from channels_app.actions.inbound import record_update
from channels_app.adapters import adapter_for
from channels_app.adapters.email import trust
from channels_app.adapters.email.adapter import EmailAdapter
from channels_app.models import Channel, InboundStatus, InboundUpdate
from channels_app.recovery import sweep_unanswered
from tests.chat_platforms import test_email
from tests.chat_platforms.test_email import USER, bodies, mail
from tests.fakes.dkim_dns import FAKE_DKIM
from tests.fakes.fake_llm import Turn as FakeTurn

pytestmark = pytest.mark.django_db(transaction=True)

mailbox = test_email.mailbox  # the channel (sender USER linked to the member, the fake's servers allowed)


@pytest.fixture
def caps(settings: Any, tmp_path: Any) -> Any:
    settings.VAR_DIR = tmp_path
    settings.CLAW_CHAT_FILE_MAX_BYTES = 4096
    return settings


def crashed(channel: Channel, fake_mail: Any, message: EmailMessage) -> InboundUpdate:
    """The mail delivered, fetched, checked and stored as the poller does it, then the
    worker died: never dispatched, four minutes ago."""
    uid = fake_mail.deliver(message)
    adapter = adapter_for(channel)
    assert isinstance(adapter, EmailAdapter)
    raw = dict(asyncio.run(adapter.fetch_new(0)))[uid]
    parsed = adapter.parse_mail(uid, raw, adapter.uidvalidity)
    assert parsed is not None
    stored = record_update(channel, trust.apply(parsed, trust.check(raw)))
    assert stored is not None
    InboundUpdate.objects.unscoped().filter(pk=stored.pk).update(
        received_at=timezone.now() - timedelta(minutes=4)
    )
    return stored


def with_file(message: EmailMessage, name: str, content: bytes) -> EmailMessage:
    message.add_attachment(content, maintype="text", subtype="plain", filename=name)
    return message


def sweep() -> int:
    return asyncio.run(sweep_unanswered())


def row(stored: InboundUpdate) -> InboundUpdate:
    return InboundUpdate.objects.unscoped().get(pk=stored.pk)


def test_a_crashed_mail_is_answered_once_with_its_attachment_read_again(
    caps, mailbox, fake_mail, fake_llm, inline_runs, live_agent
):
    fake_llm.script(FakeTurn(text="Got your notes, Ada."))
    stored = crashed(mailbox, fake_mail, with_file(mail("Please read my notes."), "notes.txt", b"line one\n"))
    lookups = len(FAKE_DKIM.lookups)
    assert sweep() == 1
    fake_mail.wait_for(lambda f: "Got your notes, Ada." in bodies(f))
    assert sweep() == 0, "answered once: the second sweep finds nothing"

    assert len(FAKE_DKIM.lookups) == lookups, "the verdict is the one reached when the mail came"
    assert len(fake_llm.requests) == 1
    said = str(fake_llm.requests[0].json["messages"][-1]["content"])
    assert "Please read my notes." in said
    assert "uploads/notes.txt" in said
    kept = Attachment.objects.unscoped().get(session__channel="email")
    assert (kept.name, kept.uploaded_by_id) == ("notes.txt", live_agent.member.pk)
    assert row(stored).status == InboundStatus.ANSWERED
    assert row(stored).detail == "1 attached"
    [reply] = fake_mail.sent_mail()
    assert reply["To"] == USER
    assert reply["In-Reply-To"] == stored.platform_id


def test_a_proven_sender_stays_proven_after_its_key_left_dns(
    mailbox, fake_mail, fake_llm, inline_runs, live_agent, monkeypatch
):
    fake_llm.script(FakeTurn(text="Still you."))
    stored = crashed(mailbox, fake_mail, mail("are you there?"))
    assert row(stored).payload["sender_proven"] is True
    # DNS has no key now: checking again would refuse the member.
    monkeypatch.setattr(trust, "dns_lookup", lambda name, timeout=5: None)
    assert sweep() == 1
    fake_mail.wait_for(lambda f: "Still you." in bodies(f))
    run = Run.objects.unscoped().get(pk=row(stored).run_id)
    assert run.session.user_id == live_agent.member.pk


def test_an_unproven_sender_is_restored_unproven(mailbox, fake_mail, fake_llm, inline_runs):
    stored = crashed(mailbox, fake_mail, mail("I am Ada, really.", signed_by="evil.test"))
    payload = row(stored).payload
    assert payload["sender_proven"] is False
    assert row(stored).sender_id == f"unverified:{USER}"
    assert sweep() == 1
    found = row(stored)
    assert found.status == InboundStatus.REFUSED
    assert found.detail.startswith("sender not proven: DKIM signature of evil.test is not aligned")
    assert not fake_llm.requests
    assert not fake_mail.sent_mail(), "nothing goes to a From that may be someone else's"


def test_a_mail_gone_from_the_mailbox_is_answered_and_its_files_named_as_not_read(
    caps, mailbox, fake_mail, fake_llm, inline_runs
):
    fake_llm.script(FakeTurn(text="I only have your words."))
    stored = crashed(mailbox, fake_mail, with_file(mail("See attached."), "plan.txt", b"the plan\n"))
    fake_mail.rebuild(keep=0)  # restored from a backup: new UIDVALIDITY, the mail gone
    assert sweep() == 1
    fake_mail.wait_for(lambda f: "I only have your words." in bodies(f))
    assert any("plan.txt: no longer in the mailbox" in b for b in bodies(fake_mail))
    said = str(fake_llm.requests[0].json["messages"][-1]["content"])
    assert "See attached." in said
    assert "Not attached: plan.txt: no longer in the mailbox" in said
    assert not Attachment.objects.unscoped().filter(session__channel="email").exists()
    assert row(stored).status == InboundStatus.ANSWERED


def test_what_is_stored_of_a_mail_is_storable(mailbox, fake_mail, fake_llm, inline_runs):
    fake_llm.script(FakeTurn(text="Read it."))
    odd = mail("before\x00after", subject="zero\x00byte")
    stored = crashed(mailbox, fake_mail, odd)
    payload = row(stored).payload
    assert "\\u0000" not in json.dumps(payload)
    assert payload["text"] == "beforeafter"
    assert set(payload) >= {"uid", "uidvalidity", "sha256", "from", "thread", "text", "sender_proven"}
    assert sweep() == 1
    fake_mail.wait_for(lambda f: "Read it." in bodies(f))
    assert "beforeafter" in str(fake_llm.requests[0].json["messages"][-1]["content"])
