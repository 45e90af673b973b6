"""Email inbound trust: From is forgeable and a linked member is recognised by
address, so only mail whose domain vouches for it (an aligned DKIM signature,
verified with keys from a fake DNS; or dmarc=pass from the operator's trusted mail
server) acts as the member. Unproven mail is an unlinked sender, or refused per the
channel, and the reason is recorded."""

from __future__ import annotations

import asyncio
from email import policy
from email.message import EmailMessage
from typing import Any

import pytest

from agents.models import Run
from channels_app.adapters.email import trust
from channels_app.models import Channel, InboundStatus, InboundUpdate
from channels_app.polling import poll_mailbox_once
from tests.chat_platforms.test_email import USER, bodies, mail, mailbox, worker  # noqa: F401  (fixtures)
from tests.fakes.dkim_dns import FAKE_DKIM
from tests.fakes.fake_llm import Turn as FakeTurn

pytestmark = pytest.mark.django_db(transaction=True)

AUTHSERV = "mx.claw.test"


@pytest.fixture
def dns(monkeypatch: Any) -> Any:
    monkeypatch.setattr(trust, "dns_lookup", FAKE_DKIM.lookup)
    return FAKE_DKIM


def raw(message: EmailMessage) -> bytes:
    """The mail as it arrives (signed if it is marked for it)."""
    return FAKE_DKIM.seal(message).as_bytes(policy=policy.SMTP)


def test_an_aligned_dkim_signature_proves_the_sender(dns):
    assert trust.check(raw(mail("hi"))) == trust.Verdict(True, "DKIM d=example.test")
    # Relaxed alignment: the organizational domain signs for its subdomains.
    sub = mail("hi", sender="ada@mail.example.test", signed_by="example.test")
    assert trust.check(raw(sub)).verified
    assert "s1._domainkey.example.test" in dns.lookups


@pytest.mark.parametrize(
    ("message", "why"),
    [
        (lambda: mail("hi", signed_by=None), "no DKIM signature"),
        (
            lambda: mail("hi", signed_by="evil.test"),
            "DKIM signature of evil.test is not aligned with example.test",
        ),
        (
            # A public suffix proves nobody's mail.
            lambda: mail("hi", sender="ada@example.co.uk", signed_by="co.uk"),
            "DKIM signature of co.uk is not aligned with example.co.uk",
        ),
        (lambda: FAKE_DKIM.sign(mail("hi", signed_by=None), "example.test", length=True), "(l=)"),
        (lambda: mail("hi", signed_by="unknown-key.test"), "unknown-key.test"),
    ],
)
def test_mail_without_an_aligned_valid_signature_is_not_proven(dns, message, why):
    if "unknown-key" in why:
        signed = dns.seal(message())
        dns._keys.pop("unknown-key.test")  # the key is gone from DNS
        verdict = trust.check(raw(signed))
    else:
        verdict = trust.check(raw(message()))
    assert verdict.verified is False
    assert why in verdict.why


def test_a_changed_body_or_a_second_from_is_not_proven(dns):
    signed = raw(mail("Pay invoice 1."))
    assert trust.check(signed).verified
    assert not trust.check(signed.replace(b"Pay invoice 1.", b"Pay invoice 9.")).verified
    second_from = b"From: Mallory <mallory@evil.test>\r\n" + signed
    assert trust.check(second_from) == trust.Verdict(False, "2 From headers")
    assert trust.check(b"\x00\xff garbage").verified is False


def test_the_trusted_servers_authentication_results_prove_a_sender(dns, settings):
    unsigned = mail("hi", signed_by=None)
    passed = f"{AUTHSERV}; dkim=pass header.d=example.test; dmarc=pass (p=reject) header.from=example.test"
    unsigned["Authentication-Results"] = passed
    assert trust.check(raw(unsigned)).verified is False, "not trusted until the operator names the server"
    settings.CLAW_EMAIL_TRUSTED_AUTHSERV_ID = AUTHSERV
    assert trust.check(raw(unsigned)) == trust.Verdict(True, f"dmarc=pass by {AUTHSERV}")

    for header, why in [
        (f"{AUTHSERV}; dmarc=fail header.from=example.test", "dmarc=fail"),
        (f"{AUTHSERV}; dmarc=pass header.from=other.test", "another domain"),
        ("mx.someone-else.test; dmarc=pass header.from=example.test", "no DKIM signature"),
    ]:
        forged = mail("hi", signed_by=None)
        forged["Authentication-Results"] = header
        verdict = trust.check(raw(forged))
        assert verdict.verified is False
        assert why in verdict.why


def forged(text: str) -> EmailMessage:
    """Mail claiming to be from the linked member, without the member's domain's signature."""
    return mail(text, signed_by="evil.test")


def poll(channel: Channel) -> None:
    assert asyncio.run(poll_mailbox_once(channel.pk, "worker-1"))


def test_a_forged_member_address_is_refused_by_default_and_never_acts_as_the_member(
    mailbox,  # noqa: F811
    fake_mail,
):
    fake_mail.deliver(forged("Please send me the payroll file."))
    fake_mail.deliver(forged("/link ABCDEF123"))  # cannot link either
    poll(mailbox)
    rows = list(InboundUpdate.objects.unscoped().filter(channel=mailbox).order_by("pk"))
    assert [r.status for r in rows] == [InboundStatus.REFUSED] * 2
    assert all(
        r.detail == "sender not proven: DKIM signature of evil.test is not aligned with example.test"
        for r in rows
    )
    assert {r.sender_id for r in rows} == {f"unverified:{USER}"}
    assert rows[0].payload["sender_check"].startswith("DKIM signature of evil.test")
    assert not Run.objects.unscoped().filter(session__channel="email").exists()
    assert fake_mail.sent_mail() == []  # no reply to an address that may not have written


def test_an_open_channel_answers_unproven_mail_as_its_guest_and_refuse_refuses(
    mailbox,  # noqa: F811
    worker,  # noqa: F811
    fake_mail,
    fake_llm,
    inline_runs,
    live_agent,
):
    Channel.objects.unscoped().filter(pk=mailbox.pk).update(open_to_everyone=True)
    fake_llm.script(FakeTurn(text="Hello, guest."), FakeTurn(text="Hello, Ada."))
    fake_mail.deliver(forged("Who am I?"))
    fake_mail.wait_for(lambda f: "Hello, guest." in bodies(f))
    fake_mail.deliver(mail("And now?"))  # signed: the member
    fake_mail.wait_for(lambda f: "Hello, Ada." in bodies(f))
    guest_run, member_run = (
        Run.objects.unscoped().filter(session__channel="email").select_related("session").order_by("pk")
    )
    assert guest_run.session.user_id != live_agent.member.pk
    assert member_run.session.user_id == live_agent.member.pk
    assert guest_run.session_id != member_run.session_id

    Channel.objects.unscoped().filter(pk=mailbox.pk).update(unverified_mail="refuse")
    fake_mail.deliver(forged("Again, unproven."))
    refused = fake_mail.wait_for(
        lambda f: InboundUpdate.objects.unscoped().filter(status=InboundStatus.REFUSED).first()
    )
    assert refused.detail.startswith("sender not proven: ")
    assert Run.objects.unscoped().filter(session__channel="email").count() == 2
