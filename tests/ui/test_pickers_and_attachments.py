"""The chat header's agent and model pickers, and attachments (issue 26, items 5 and 6;
E23), in a real browser: the model picked is the one the next request names; an
image attached reaches the vision model as an image part, again when the reply is
regenerated, and shows in the transcript after a reload; a text file lands in the
member's own workspace; a refused type says why; the agent picker hands the chat
over."""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from agents.actions.config import do_create_agent
from agents.models import Attachment, ModelProfile, Session
from tests.fakes.fake_llm import Turn
from tests.ui.conftest import Stack, signed_in_page
from tests.ui.test_chat_ui import chat_session, send, wait_for_status
from tools_app.workspace import OPEN, workspace_path

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def png(width: int = 2, height: int = 2) -> bytes:
    """A real (tiny, red) PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def reply_requests(fake_llm: Any) -> list[dict[str, Any]]:
    return [
        r.json for r in fake_llm.requests if r.path.endswith("/chat/completions") and isinstance(r.json, dict)
    ]


def image_urls(request: dict[str, Any]) -> list[str]:
    return [
        part["image_url"]["url"]
        for message in request["messages"]
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "image_url"
    ]


@pytest.mark.parametrize("width", [1280, 390])
def test_pickers_and_attachments(
    stack: Stack, browser: Any, live_agent: Any, fake_llm: Any, width: int, tmp_path: Path
) -> None:
    vision = ModelProfile.objects.unscoped().create(
        tenant=live_agent.tenant, provider=live_agent.provider, model="eyes-1", supports_vision=True
    )
    billing = do_create_agent(live_agent.tenant, slug="billing", name="Billing desk", model=live_agent.model)
    fake_llm.script(
        Turn(text="A red square."),
        Turn(text="Still a red square."),
    )
    session = chat_session(live_agent)
    picture, notes, program = tmp_path / "red.png", tmp_path / "notes.txt", tmp_path / "tool.exe"
    picture.write_bytes(png())
    notes.write_text("line one\n")
    program.write_bytes(b"MZ\x90\x00")

    page = signed_in_page(browser, stack, live_agent.member)
    page.set_viewport_size({"width": width, "height": 800})
    page.goto(f"{stack.url}/chat/s/{session.pk}/")
    page.wait_for_selector("body[data-socket=open]", state="attached")
    assert page.locator("#pickers").is_visible()

    # The model picker sends /model: the session's override, and the next request's model.
    page.select_option("#model-picker", label="a-provider:eyes-1 · images")
    page.wait_for_selector(".note >> text=Switched this session to a-provider:eyes-1")
    assert Session.objects.unscoped().get(pk=session.pk).model_override_id == vision.pk

    # Attach: an image (for the model), a text file (for the workspace), a refused type.
    page.set_input_files("#attach-input", [str(picture), str(notes), str(program)])
    page.wait_for_selector(".attachment-chip.failed >> text=this type of file cannot be attached")
    ready = page.locator(".attachment-chip:not(.failed)")
    expect(ready).to_have_count(2)
    expect(ready.filter(has_text="uploading")).to_have_count(0)
    page.locator(".attachment-chip.failed .chip-remove").click()
    send(page, "What is in this picture?")
    page.wait_for_selector(".assistant-text >> text=A red square.")
    wait_for_status(session, "completed")

    first = reply_requests(fake_llm)[-1]
    assert first["model"] == "eyes-1"
    expected = "data:image/png;base64," + base64.b64encode(png()).decode()
    assert image_urls(first) == [expected]
    assert "(Attached to your workspace: uploads/notes.txt)" in str(first["messages"])
    stored = workspace_path(
        tenant_id=live_agent.tenant.pk,
        agent_id=live_agent.agent.pk,
        agent_type=OPEN,
        user_id=live_agent.member.pk,
    )
    assert (stored / "uploads" / "notes.txt").read_text() == "line one\n"
    assert page.locator(".user-attachments .file-chip", has_text="notes.txt").count() == 1

    # Regenerate: the image goes with the question again.
    page.click(".regenerate-button")
    page.wait_for_selector(".assistant-text >> text=Still a red square.")
    assert image_urls(reply_requests(fake_llm)[-1]) == [expected]
    assert Attachment.objects.unscoped().filter(session_id=session.pk, turn__state="complete").count() == 2

    # After a reload the picture shows in the question (served from this origin).
    page.reload()
    image = page.locator(".user-attachments img.attachment-image")
    image.wait_for()
    expect(image).to_have_js_property("naturalWidth", 2)

    # The agent picker hands the chat over (/agent).
    page.select_option("#agent-picker", "billing")
    expect(page.locator("#agent-name")).to_have_text("Billing desk")
    assert Session.objects.unscoped().get(pk=session.pk).agent_id == billing.pk
    page.context.close()
