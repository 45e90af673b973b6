"""Email end to end: mail delivered to the fake IMAP server, fetched by a worker
holding the channel's lease, the agent run by this process's worker loop, the reply
sent through the fake SMTP server, threaded by Message-ID / In-Reply-To."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterator
from email.message import EmailMessage
from typing import Any

import pytest

from agents.models import ApprovalRequest, Run
from channels_app.adapters.email.adapter import EmailAdapter, strip_quoted
from channels_app.models import Channel, InboundUpdate
from channels_app.polling import run_pollers
from tests.chat_platforms.conftest import link, make_channel
from tests.fakes.dkim_dns import SIGN_HEADER
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.tools.helpers import tool_setting
from tools_app.actions.extensions import do_allow_host

pytestmark = pytest.mark.django_db(transaction=True)

BOT = "agent@claw.test"
USER = "ada@example.test"
_ids = itertools.count(1)


def mail(
    text: str,
    *,
    subject: str = "Hello",
    sender: str = USER,
    replying_to: Any = None,
    signed_by: str | None = "",
    **headers: str,
) -> EmailMessage:
    """A mail from ``sender``; ``replying_to`` (a mail) sets In-Reply-To and References
    as mail clients do (the parent's References, then its Message-ID). Signed with
    DKIM by the sender's domain when delivered, as its mail server would
    (``signed_by``: another domain; None: not signed)."""
    message = EmailMessage()
    message["From"] = f"Ada <{sender}>"
    message["To"] = BOT
    message["Subject"] = subject
    message["Message-ID"] = f"<m{next(_ids)}@example.test>"
    if replying_to is not None:
        message["In-Reply-To"] = replying_to["Message-ID"]
        message["References"] = f"{replying_to.get('References', '')} {replying_to['Message-ID']}".strip()
    for name, value in headers.items():
        message[name.replace("_", "-")] = value
    message.set_content(text)
    if signed_by is not None:  # signed when the fake server receives it (attachments may follow)
        message[SIGN_HEADER] = signed_by or sender.rpartition("@")[2]
    return message


@pytest.fixture
def mailbox(live_agent: Any, fake_mail: Any) -> Channel:
    do_allow_host(live_agent.tenant, "127.0.0.1", acting_user=live_agent.owner)
    channel = make_channel(
        live_agent,
        "email",
        account_id=BOT,
        bot_token="mail-password",
        imap_url=f"imap://127.0.0.1:{fake_mail.imap_port}",
        smtp_url=f"smtp://127.0.0.1:{fake_mail.smtp_port}",
        receive_mode="polling",
    )
    link(channel, USER, live_agent.member)
    return channel


@pytest.fixture
def worker(mailbox: Channel) -> Iterator[None]:
    stop = threading.Event()
    thread = threading.Thread(
        target=lambda: asyncio.run(run_pollers(stop, "worker-1", scan_seconds=0.2)), daemon=True
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


def bodies(fake: Any) -> list[str]:
    return [m.get_content().strip() for m in fake.sent_mail()]


def test_a_mail_is_answered_in_its_thread_once_and_automatic_mail_is_not(
    mailbox, worker, fake_mail, fake_llm, inline_runs
):
    fake_llm.script(FakeTurn(text="Hello Ada, answered by mail."), FakeTurn(text="Still the same thread."))
    first = mail("Can you help?", subject="Quarterly numbers")
    fake_mail.deliver(mail("I am away", Auto_Submitted="auto-replied"))  # never answered (no loops)
    fake_mail.deliver(first)
    fake_mail.deliver(first)  # the same Message-ID again: stored once
    fake_mail.wait_for(lambda f: "Hello Ada, answered by mail." in bodies(f))
    reply = fake_mail.sent_mail()[0]
    assert reply["To"] == USER
    assert BOT in reply["From"]
    assert reply["Subject"] == "Re: Quarterly numbers"
    assert reply["In-Reply-To"] == first["Message-ID"]
    assert reply["Auto-Submitted"] == "auto-replied"
    # The answer to the reply continues the same session.
    fake_mail.deliver(
        mail(
            f"And next quarter?\n\nOn Monday Claw wrote:\n> {bodies(fake_mail)[0]}",
            replying_to=reply,
        )
    )
    fake_mail.wait_for(lambda f: "Still the same thread." in bodies(f))
    assert Run.objects.unscoped().filter(session__channel="email").values("session").distinct().count() == 1
    assert fake_llm.requests[1].json["messages"][-1]["content"] == "And next quarter?"
    assert Channel.objects.unscoped().get(pk=mailbox.pk).poll_offset == 4
    assert InboundUpdate.objects.unscoped().filter(channel=mailbox).count() == 2
    assert len(fake_mail.sent_mail()) == 2


def test_approval_by_reply(mailbox, worker, fake_mail, fake_llm, inline_runs, live_agent):
    tool_setting(live_agent.agent, "bash", execution="host")
    fake_llm.script(FakeTurn(tool_calls=[("bash", {"command": "ls"}, "call_ls")]))
    fake_mail.deliver(mail("list files"))
    asked = fake_mail.wait_for(lambda f: [m for m in f.sent_mail() if "Approval needed" in m.get_content()])
    fake_llm.script(FakeTurn(text="Listed."))
    quoted = "\n".join(f"> {line}" for line in asked[0].get_content().splitlines())
    fake_mail.deliver(mail(f"yes\n\nOn Tuesday, Claw wrote:\n{quoted}", replying_to=asked[0]))
    fake_mail.wait_for(lambda f: "Listed." in bodies(f))
    assert ApprovalRequest.objects.unscoped().get(call_id="call_ls").status == "approved"
    assert strip_quoted("no\n> quoted\nthanks") == "no\nthanks"


def test_a_temporary_smtp_refusal_is_retried_and_a_permanent_one_reported(
    mailbox, worker, fake_mail, fake_llm, inline_runs
):
    fake_mail.fail_next("451 4.3.0 Try again later")
    fake_llm.script(FakeTurn(text="After greylisting."))
    fake_mail.deliver(mail("hi"))
    fake_mail.wait_for(lambda f: "After greylisting." in bodies(f))

    fake_mail.fail_next("550 5.1.1 No such user", times=3)
    fake_llm.script(FakeTurn(text="Lost."))
    fake_mail.deliver(mail("again"))
    failed = fake_mail.wait_for(
        lambda f: InboundUpdate.objects.unscoped().filter(detail__contains="550").first()
    )
    assert failed.detail.startswith("delivery failed")
    assert len(fake_mail.failures) == 2  # one attempt: a 5xx is not retried


def test_a_private_server_address_needs_the_tenants_allow_list(live_agent, fake_mail):
    channel = make_channel(
        live_agent,
        "email",
        account_id=BOT,
        bot_token="mail-password",
        imap_url=f"imap://127.0.0.1:{fake_mail.imap_port}",
        smtp_url="smtp://10.0.0.1:25",
        receive_mode="polling",
    )
    adapter = EmailAdapter(channel)
    with pytest.raises(Exception, match="refused") as refused:
        asyncio.run(adapter.fetch_new(0))
    assert refused.value.retryable is False  # type: ignore[attr-defined]
