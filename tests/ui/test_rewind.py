"""Regenerate, Edit and Retry in a real browser (issue 26, item 2): each takes the last
turn back through its undo checkpoint, so the model's next request holds the
question once, without the taken-back reply, and a failed question is never merged
into the next request."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from agents.actions.rewind import RewindRefused, do_rewind_last_turn
from agents.actions.runs import do_send_message
from agents.models import Run, RunStatus, Session, TurnState
from agents.models import Turn as StoredTurn
from claw_platform.tenancy.context import tenant_context
from tests.fakes.fake_llm import Turn
from tests.ui.conftest import Stack, signed_in_page
from tests.ui.test_chat_ui import TITLE_PROMPT, chat_session, send, wait_for_status

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def chat_requests(fake_llm: Any) -> list[list[dict[str, Any]]]:
    """The messages of every reply request (title requests left out)."""
    out = []
    for request in fake_llm.requests:
        if not request.path.endswith("/chat/completions") or not isinstance(request.json, dict):
            continue
        messages = request.json.get("messages", [])
        if any(TITLE_PROMPT in str(m.get("content", "")) for m in messages):
            continue
        out.append([m for m in messages if m.get("role") != "system"])
    return out


def user_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content")) for m in messages if m.get("role") == "user"]


@pytest.mark.parametrize("width", [1280, 390])
def test_regenerate_edit_and_retry_rewind_the_last_turn(
    stack: Stack, browser: Any, live_agent: Any, fake_llm: Any, width: int
) -> None:
    fake_llm.script(
        Turn(text="First answer."),
        Turn(text="Second answer."),
        Turn(text="An answer about puns."),
        Turn.http_error(400, message="model not found: nope"),
        Turn(text="Recovered answer."),
    )
    session = chat_session(live_agent)
    page = signed_in_page(browser, stack, live_agent.member)
    page.set_viewport_size({"width": width, "height": 800})
    page.goto(f"{stack.url}/chat/s/{session.pk}/")
    page.wait_for_selector("body[data-socket=open]", state="attached")

    send(page, "Tell me a joke")
    page.wait_for_selector(".assistant-text >> text=First answer.")
    wait_for_status(session, "completed")

    # Regenerate: the same question again, the first answer gone.
    page.click(".regenerate-button")
    page.wait_for_selector(".assistant-text >> text=Second answer.")
    assert page.locator(".assistant-text", has_text="First answer.").count() == 0
    assert page.locator(".user-msg", has_text="Tell me a joke").count() == 1
    requests = chat_requests(fake_llm)
    assert user_texts(requests[-1]) == ["Tell me a joke"]
    assert "First answer." not in str(requests[-1])

    # Edit the last question.
    page.wait_for_selector(".edit-button")
    page.click(".edit-button")
    page.fill(".edit-text", "Tell me a pun")
    page.click(".edit-form button[type=submit]")
    page.wait_for_selector(".assistant-text >> text=An answer about puns.")
    assert page.locator(".user-msg", has_text="Tell me a joke").count() == 0
    assert page.locator(".user-msg", has_text="Tell me a pun").count() == 1
    requests = chat_requests(fake_llm)
    assert user_texts(requests[-1]) == ["Tell me a pun"]
    assert "Second answer." not in str(requests[-1])

    # A failed reply, then Retry: the question is asked once, not twice.
    send(page, "And another one")
    page.locator(".run-error").wait_for()
    page.click(".retry-button")
    page.wait_for_selector(".assistant-text >> text=Recovered answer.")
    assert page.locator(".run-error").count() == 0
    assert page.locator(".user-msg", has_text="And another one").count() == 1
    requests = chat_requests(fake_llm)
    assert user_texts(requests[-1]) == ["Tell me a pun", "And another one"]

    # A reload shows the same conversation: the taken-back turns stay hidden.
    page.reload()
    page.wait_for_selector(".assistant-text >> text=Recovered answer.")
    assert page.locator(".user-msg").all_inner_texts() == ["Tell me a pun", "And another one"]
    rewound = StoredTurn.objects.unscoped().filter(session_id=session.pk, state=TurnState.REWOUND).count()
    assert rewound == 3
    page.context.close()


def test_a_turn_is_taken_back_only_when_it_is_the_last_and_nothing_runs(live_agent: Any) -> None:
    session = chat_session(live_agent)
    with tenant_context(session.tenant_id), pytest.raises(RewindRefused, match="no reply"):
        do_rewind_last_turn(Session.objects.unscoped().get(pk=session.pk))
    # One transaction: the module's live worker never sees the run queued (it would
    # answer it, and finish the turn after it was taken back).
    with transaction.atomic():
        run = do_send_message(session, "first", acting_user=live_agent.member)
        assert run is not None
        with (
            tenant_context(session.tenant_id),
            pytest.raises(RewindRefused, match="Wait for the current reply"),
        ):
            do_rewind_last_turn(Session.objects.unscoped().get(pk=session.pk))
        Run.objects.unscoped().filter(pk=run.pk).update(status=RunStatus.COMPLETED)
    with tenant_context(session.tenant_id):
        taken = do_rewind_last_turn(Session.objects.unscoped().get(pk=session.pk))
    assert taken.user_text == "first"
    # Nothing else to take back: the rewound turn is not taken twice.
    with tenant_context(session.tenant_id), pytest.raises(RewindRefused, match="no reply"):
        do_rewind_last_turn(Session.objects.unscoped().get(pk=session.pk))
