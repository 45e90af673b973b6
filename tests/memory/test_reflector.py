"""C9: once a chat is idle, the reflector's light LLM pass (the fake LLM over real
HTTP) keeps the durable facts about its user as memories, without duplicates,
charged through the budget guard with usage of purpose ``reflection``; a refused
call writes nothing and is audited."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from agents.actions.conversation import do_create_session
from agents.budgets.models import Budget
from agents.memory.reflector import idle_sessions, parse_facts, reflect_idle_sessions_task, reflect_session
from agents.models import MemoryEntry, Message, Session, Thread, UsageRecord
from claw_platform.audit.models import AuditEvent
from tests.fakes.fake_llm import Turn

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def idle_chat(tenant_a, fake_llm):
    provider = tenant_a.provider
    provider.base_url = fake_llm.openai_base_url
    provider.save()
    session = do_create_session(tenant_a.agent, user=tenant_a.member, title="trip")
    thread = Thread.objects.unscoped().get(pk=session.active_thread_id)
    said = [
        ("user", "Book me a flight to Lisbon. I always want a window seat."),
        ("assistant", "Done: a window seat on the 9:40 to Lisbon."),
        ("user", "Great. Also my dog Biscuit needs a sitter while I'm away."),
    ]
    Message.objects.unscoped().bulk_create(
        Message(
            tenant_id=session.tenant_id,
            session=session,
            thread=thread,
            seq=i + 1,
            role=role,
            parts=[{"type": "text", "text": text}],
        )
        for i, (role, text) in enumerate(said)
    )
    Thread.objects.unscoped().filter(pk=thread.pk).update(last_seq=len(said))
    Session.objects.unscoped().filter(pk=session.pk).update(
        last_activity_at=timezone.now() - timedelta(minutes=45)
    )
    return session


def test_an_idle_chat_leaves_its_durable_facts_once(tenant_a, fake_llm, idle_chat):
    MemoryEntry.objects.unscoped().create(
        tenant=tenant_a.tenant,
        scope="user",
        user=tenant_a.member,
        agent=tenant_a.agent,
        content="Always wants a window seat when flying",
    )
    fake_llm.script(
        Turn(
            text="- The user's dog is called Biscuit\n"
            "- always wants a WINDOW seat when flying.\n"
            "- The user's dog is called Biscuit\n"
            "Some chatter that is not a fact"
        )
    )
    assert str(idle_chat.pk) in idle_sessions()
    assert reflect_idle_sessions_task() == 1

    mine = MemoryEntry.objects.unscoped().filter(
        tenant=tenant_a.tenant, user=tenant_a.member, session=idle_chat
    )
    assert [(m.content, m.scope, m.category) for m in mine] == [
        ("The user's dog is called Biscuit", "user", "core")
    ]
    sent = fake_llm.requests[-1].json
    assert "durable facts" in sent["messages"][0]["content"]
    assert "my dog Biscuit" in sent["messages"][-1]["content"]
    usage = UsageRecord.objects.unscoped().get(session=idle_chat, purpose="reflection")
    assert usage.input_tokens > 0
    event = AuditEvent.objects.unscoped().get(action="memory.reflected", object_id=str(idle_chat.pk))
    assert event.diff["duplicates"] == [None, 2]
    # Reflected: not read again until the chat has new activity.
    assert str(idle_chat.pk) not in idle_sessions()
    # The reply's facts: bullets only, NONE for none, at most ten.
    assert parse_facts("NONE") == []
    assert parse_facts("- a\n* b\nnot a fact\n-   \n- c") == ["a", "b", "c"]
    assert len(parse_facts("\n".join(f"- fact {i}" for i in range(30)))) == 10


def test_a_refused_call_writes_nothing_and_is_audited(tenant_a, fake_llm, idle_chat):
    # The fixture's model has no price: a money budget refuses it before any request.
    Budget.objects.unscoped().create(tenant=tenant_a.tenant, limit=Decimal("5"), period="month")
    before = MemoryEntry.objects.unscoped().count()
    result = async_to_sync(reflect_session)(str(idle_chat.pk))
    assert result.written == []
    assert "price" in result.error
    assert fake_llm.requests == []
    assert MemoryEntry.objects.unscoped().count() == before
    event = AuditEvent.objects.unscoped().get(action="memory.reflected", object_id=str(idle_chat.pk))
    assert "error" in event.diff
    assert str(idle_chat.pk) not in idle_sessions()
