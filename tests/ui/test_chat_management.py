"""A member's chats from the chat page, in a real browser (issue 26, item 4): search
over titles and content, rename, delete with undo, export as Markdown and JSON, and
the header's token and cost figures after an approval; and the same routes refusing
another member (the member rule)."""

from __future__ import annotations

import asyncio
import contextvars
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from agents.actions.conversation import do_create_session, do_finish_turn, do_start_turn
from agents.engine.interfaces import StepRecord
from agents.engine.types import Message as EngineMessage
from agents.models import Session
from agents.runtime.store import DjangoRunStore, TurnBinding
from claw_platform.tenancy.actions import do_add_member
from claw_platform.tenancy.context import tenant_context
from claw_platform.tenancy.models import Role
from tests.fakes.fake_llm import Turn
from tests.fixtures.tenants import make_user
from tests.ui.conftest import Stack, signed_in_page
from tests.ui.test_chat_ui import open_session, send, wait_for_status

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def chat_with(tenant: Any, title: str, question: str, answer: str) -> Session:
    """A chat with one settled turn, its messages stored as the engine stores them."""
    session = do_create_session(tenant.agent, user=tenant.member, title=title)
    with tenant_context(session.tenant_id):
        turn = do_start_turn(session, question)
        store = DjangoRunStore(
            TurnBinding(
                session.tenant_id, session.pk, turn.thread_id, turn.pk, session.agent_id, tenant.member.pk
            )
        )
        step = StepRecord(0, [EngineMessage.user(question), EngineMessage.assistant(answer)])
        # (In a thread of its own, in this tenant's scope: Playwright's loop runs in this one.)
        with ThreadPoolExecutor(1) as thread:
            thread.submit(contextvars.copy_context().run, asyncio.run, store.persist_step(step)).result()
        do_finish_turn(turn, status="completed", text=answer)
    return session


@pytest.mark.parametrize("width", [1280, 390])
def test_search_rename_delete_undo_and_export(
    stack: Stack, browser: Any, live_agent: Any, width: int
) -> None:
    tides = chat_with(live_agent, "Tides", "Why are there tides?", "The moon pulls the oceans.")
    chat_with(live_agent, "Sourdough", "How do I feed a starter?", "Flour and water, daily; keep it warm.")
    page = signed_in_page(browser, stack, live_agent.member)
    page.set_viewport_size({"width": width, "height": 800})
    page.goto(f"{stack.url}/chat/s/{tides.pk}/")
    page.wait_for_selector("body[data-socket=open]", state="attached")
    if width < 760:
        page.click("#open-sidebar")

    # Search: by content (the other chat's reply) and by title.
    page.fill("#chat-search", "warm")
    hit = page.locator("#search-results .search-hit")
    hit.first.wait_for()
    assert hit.count() == 1
    assert hit.locator(".session-title").inner_text() == "Sourdough"
    assert "keep it warm" in hit.locator(".session-snippet").inner_text()
    page.fill("#chat-search", "tides")
    page.locator("#search-results .search-hit .session-title", has_text="Tides").wait_for()
    page.fill("#chat-search", "nothing like this")
    page.locator("#search-results", has_text="No chat matches.").wait_for()
    page.fill("#chat-search", "")
    page.locator(".session-list").wait_for()
    if width < 760:
        page.click("#close-sidebar")

    # Rename.
    page.click("#rename-chat")
    page.fill("#rename-input", "Moon and sea")
    page.press("#rename-input", "Enter")
    page.locator("#chat-title", has_text="Moon and sea").wait_for()
    assert Session.objects.unscoped().get(pk=tides.pk).title == "Moon and sea"
    assert (
        page.locator(f'.session-link[data-session="{tides.pk}"] .session-title').inner_text()
        == "Moon and sea"
    )

    # Export: Markdown and JSON downloads of the conversation.
    with page.expect_download() as markdown:
        page.click("#export-md")
    body = Path(markdown.value.path()).read_text()
    assert body.startswith("# Moon and sea")
    assert "Why are there tides?" in body
    assert "The moon pulls the oceans." in body
    with page.expect_download() as as_json:
        page.click("#export-json")
    exported = json.loads(Path(as_json.value.path()).read_text())
    assert exported["title"] == "Moon and sea"
    assert [m["role"] for m in exported["messages"]] == ["user", "assistant"]

    # Delete, then Undo: the chat comes back.
    page.click("#delete-chat")
    page.locator("#toast", has_text="Chat deleted.").wait_for()
    page.locator(".deleted-banner").wait_for()
    assert Session.objects.unscoped().get(pk=tides.pk).deleted_at is not None
    page.click("#toast-action")
    page.locator("#toast", has_text="Chat restored.").wait_for()
    assert Session.objects.unscoped().get(pk=tides.pk).deleted_at is None
    assert page.is_visible("#transcript")

    # Delete for real: hidden everywhere, the page 404s, search no longer finds it.
    page.click("#delete-chat")
    page.locator("#toast", has_text="Chat deleted.").wait_for()
    other = signed_in_page(browser, stack, live_agent.member)
    assert other.goto(f"{stack.url}/chat/s/{tides.pk}/").status == 404
    other.goto(f"{stack.url}/chat/")
    assert other.locator(f'.session-link[data-session="{tides.pk}"]').count() == 0
    found = other.request.get(f"{stack.url}/chat/search.json?q=tides").json()
    assert found["results"] == []
    other.context.close()
    page.context.close()


def test_another_member_cannot_rename_delete_export_or_find_a_chat(live_agent: Any) -> None:
    mine = chat_with(live_agent, "M1 private", "secret question", "secret answer")
    colleague = make_user("ui_member_two")
    do_add_member(live_agent.tenant, colleague, Role.MEMBER)
    client = Client()
    client.force_login(colleague)
    base = f"/chat/s/{mine.pk}/"
    for path in ("rename/", "delete/", "restore/"):
        assert client.post(base + path, {"title": "taken"}).status_code == 404
    for path in ("export.md", "export.json", "usage.json"):
        assert client.get(base + path).status_code == 404
    assert "M1 private" not in client.get("/chat/search.json?q=private").content.decode()
    fresh = Session.objects.unscoped().get(pk=mine.pk)
    assert (fresh.title, fresh.deleted_at) == ("M1 private", None)
    # A viewer reads the team's chats but cannot change them.
    viewer = Client()
    viewer.force_login(live_agent.viewer)
    assert viewer.post(base + "rename/", {"title": "x"}).status_code == 403
    assert viewer.post(base + "delete/").status_code == 403
    assert viewer.get(base + "export.md").status_code == 200


def test_the_header_counts_tokens_after_an_approval(
    stack: Stack, browser: Any, live_agent: Any, fake_llm: Any
) -> None:
    fake_llm.script(
        Turn(tool_calls=[("delete_file", {"path": "notes.txt"}, "call_delete")]),
        Turn(text="Deleted notes.txt as you approved."),
    )
    session = do_create_session(live_agent.agent, user=live_agent.member, title="usage")
    page = open_session(browser, stack, live_agent, session)
    send(page, "Delete notes.txt")
    card = page.locator('.tool-card[data-call="call_delete"].status-awaiting')
    card.wait_for()
    card.locator("button.approve").click()
    page.wait_for_selector(".assistant-text >> text=Deleted notes.txt as you approved.")
    wait_for_status(session, "completed")
    stored = Session.objects.unscoped().get(pk=session.pk)
    expected = f"{stored.input_tokens + stored.output_tokens:,} tokens"
    assert stored.input_tokens + stored.output_tokens > 0
    page.wait_for_function(
        "t => document.getElementById('usage').textContent.startsWith(t)", arg=expected, timeout=10_000
    )
    page.context.close()


def test_what_i_remember_lists_and_forgets_my_memories(stack: Stack, browser: Any, live_agent: Any) -> None:
    from agents.models import MemoryEntry

    kept = MemoryEntry.objects.unscoped().create(
        tenant=live_agent.tenant,
        scope="user",
        agent=live_agent.agent,
        user=live_agent.member,
        content="Takes the 7:40 train on Mondays",
    )
    MemoryEntry.objects.unscoped().create(
        tenant=live_agent.tenant,
        scope="user",
        agent=live_agent.agent,
        user=live_agent.admin,
        content="The admin's own note",
    )
    page = signed_in_page(browser, stack, live_agent.member)
    page.goto(f"{stack.url}/chat/")
    page.click("#memories-link")
    item = page.locator(f"#memory-{kept.pk}")
    item.wait_for()
    assert "7:40 train" in item.inner_text()
    assert "admin's own note" not in page.content()
    item.get_by_role("button", name="Forget this memory").click()
    page.wait_for_selector(".flash")
    assert page.locator(f"#memory-{kept.pk}").count() == 0
    assert not MemoryEntry.objects.unscoped().filter(pk=kept.pk).exists()
    page.context.close()
