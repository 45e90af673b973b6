"""U1 (handoff) in a real browser: an agent hands the chat over to another agent;
the conversation shows it as a note, live and after a reload."""

from __future__ import annotations

from typing import Any

import pytest

from agents.actions.config import do_create_agent
from agents.actions.conversation import do_create_session
from agents.actions.teams import do_add_delegation
from agents.models import Session
from tests.fakes.fake_llm import Turn
from tests.ui.conftest import Stack, signed_in_page

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_handoff_shows_in_the_conversation(
    stack: Stack, browser: Any, live_agent: Any, fake_llm: Any
) -> None:
    billing = do_create_agent(live_agent.tenant, slug="billing", name="Billing desk", model=live_agent.model)
    do_add_delegation(live_agent.agent, billing, mode="handoff", description="Invoices and payments.")
    session = do_create_session(live_agent.agent, user=live_agent.member, title="set")
    fake_llm.script(
        Turn(
            tool_calls=[
                (
                    "delegate",
                    {"action": "handoff", "agent": "billing", "reason": "an invoice question"},
                    "call_h",
                )
            ]
        ),
        Turn(text="Billing will take it from here."),
    )
    page = signed_in_page(browser, stack, live_agent.member)
    page.goto(f"{stack.url}/chat/s/{session.pk}/")
    page.wait_for_selector("body[data-socket=open]", state="attached")
    page.fill("#message", "Where is my invoice?")
    page.press("#message", "Enter")
    note = page.locator(".note.handoff")
    note.wait_for()
    assert note.inner_text() == "A assistant handed this chat over to Billing desk (an invoice question)."
    page.wait_for_selector(".assistant-text >> text=Billing will take it from here.")
    assert page.locator("#agent-name").inner_text() == "Billing desk"
    assert Session.objects.unscoped().get(pk=session.pk).agent_id == billing.pk

    # A reload draws the note from the stored event.
    page.reload()
    page.locator(".note.handoff").wait_for()
    assert "handed this chat over to Billing desk" in page.locator(".note.handoff").inner_text()
    assert page.locator("#agent-name").inner_text() == "Billing desk"
