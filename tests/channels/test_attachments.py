"""Chat attachments without a browser (E23): the upload route's caps on the bytes
read and its type rules with readable refusals, files only into the uploader's own
workspace, the member rule on the picture route, a message naming only its sender's
unsent uploads, and the history re-sending images for the last
``CLAW_CHAT_IMAGE_TURNS`` turns only (placeholders before, none for a model without
vision)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from agents.actions.attachments import AttachmentRefused, unsent_attachments
from agents.actions.conversation import do_create_session, do_start_turn
from agents.engine.types import ImagePart, TextPart
from agents.models import Agent, Attachment, Message, Session
from agents.runtime.store import DjangoRunStore, TurnBinding
from claw_platform.tenancy.actions import do_add_member
from claw_platform.tenancy.context import tenant_context
from claw_platform.tenancy.models import Role
from tests.fixtures.tenants import make_user
from tests.ui.test_pickers_and_attachments import png
from tools_app.workspace import OPEN, workspace_path

pytestmark = pytest.mark.django_db

PNG = png()


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def upload(client: Client, session: Session, name: str, content: bytes, **extra: Any) -> Any:
    return client.post(
        f"/chat/s/{session.pk}/attachments/?name={name}",
        data=content,
        content_type="application/octet-stream",
        **extra,
    )


@pytest.fixture
def chat(tenant_a: Any, settings: Any, tmp_path: Path) -> Session:
    settings.VAR_DIR = tmp_path
    settings.CLAW_CHAT_IMAGE_MAX_BYTES = 2048
    settings.CLAW_CHAT_FILE_MAX_BYTES = 4096
    return do_create_session(tenant_a.agent, user=tenant_a.member, title="set")


def test_uploads_are_checked_on_the_bytes_read_with_readable_refusals(tenant_a: Any, chat: Session) -> None:
    client = signed_in(tenant_a.member)
    image = upload(client, chat, "photo.txt", PNG)  # recognised by its bytes, not its name
    assert image.status_code == 201, image.content
    assert image.json()["kind"] == "image"
    assert image.json()["media_type"] == "image/png"

    big_image = upload(client, chat, "big.png", PNG + b"\0" * 3000)
    assert big_image.status_code == 400
    assert "images may be at most 2 KB" in big_image.json()["error"]["message"]

    too_big = upload(client, chat, "huge.txt", b"x" * 5000)
    assert too_big.status_code == 413
    assert "larger than" in too_big.json()["error"]["message"]
    # A declared length over the cap is refused before anything is read.
    declared = upload(client, chat, "notes.txt", b"x" * 10, CONTENT_LENGTH="999999")
    assert declared.status_code == 413

    program = upload(client, chat, "setup.exe", b"MZ\x90\x00")
    assert program.status_code == 400
    assert "this type of file cannot be attached" in program.json()["error"]["message"]
    assert upload(client, chat, "empty.txt", b"").status_code == 400

    text = upload(client, chat, "../../etc/notes.txt", b"hello\n")
    assert text.status_code == 201
    assert text.json()["workspace_path"] == "uploads/notes.txt"
    own = workspace_path(
        tenant_id=chat.tenant_id, agent_id=chat.agent_id, agent_type=OPEN, user_id=tenant_a.member.pk
    )
    assert (own / "uploads" / "notes.txt").read_bytes() == b"hello\n"
    assert Attachment.objects.unscoped().filter(session=chat).count() == 2

    # A viewer reads the chat but cannot upload.
    assert upload(signed_in(tenant_a.viewer), chat, "a.png", PNG).status_code in (403, 404)


def test_files_go_only_into_the_uploaders_own_workspace(tenant_a: Any, chat: Session) -> None:
    Agent.objects.unscoped().filter(pk=chat.agent_id).update(agent_type="predefined")
    refused = upload(signed_in(tenant_a.member), chat, "notes.txt", b"hello\n")
    assert refused.status_code == 400
    assert "workspace the team shares" in refused.json()["error"]["message"]
    # Images are not files in a workspace: still fine.
    assert upload(signed_in(tenant_a.member), chat, "photo.png", PNG).status_code == 201


def test_a_picture_is_served_to_the_chats_member_only(tenant_a: Any, chat: Session) -> None:
    created = upload(signed_in(tenant_a.member), chat, "photo.png", PNG).json()
    url = f"/chat/s/{chat.pk}/attachments/{created['id']}/"
    mine = signed_in(tenant_a.member).get(url)
    assert mine.status_code == 200
    assert mine["Content-Type"] == "image/png"
    assert mine.content == PNG
    assert mine["X-Content-Type-Options"] == "nosniff"
    other = make_user("a_member_two")
    do_add_member(tenant_a.tenant, other, Role.MEMBER)
    assert signed_in(other).get(url).status_code == 404


def test_a_message_names_only_its_senders_unsent_uploads(tenant_a: Any, chat: Session) -> None:
    created = upload(signed_in(tenant_a.member), chat, "photo.png", PNG).json()
    with tenant_context(chat.tenant_id):
        assert [a.pk for a in unsent_attachments(chat, tenant_a.member, [created["id"]])] == [created["id"]]
        with pytest.raises(AttachmentRefused, match="not found"):
            unsent_attachments(chat, tenant_a.owner, [created["id"]])  # not the owner's upload
        with pytest.raises(AttachmentRefused, match="ids"):
            unsent_attachments(chat, tenant_a.member, ["x"])
        with pytest.raises(AttachmentRefused, match="At most"):
            unsent_attachments(chat, tenant_a.member, list(range(1, 10)))


def test_history_resends_images_of_the_last_turns_only(tenant_a: Any, chat: Session, settings: Any) -> None:
    settings.CLAW_CHAT_IMAGE_TURNS = 2
    turns = []
    with tenant_context(chat.tenant_id):
        for n in range(1, 4):
            turn = do_start_turn(chat, f"question {n}")
            Message.objects.create(
                session=chat,
                thread_id=turn.thread_id,
                turn=turn,
                seq=n,
                role="user",
                parts=[
                    {"type": "image", "media_type": "image/png"},
                    {"type": "text", "text": f"question {n}"},
                ],
            )
            Attachment.objects.create(
                session=chat,
                turn=turn,
                kind="image",
                name=f"{n}.png",
                media_type="image/png",
                size=1,
                data=bytes([n]),
            )
            turns.append(turn)
    last = turns[-1]
    binding = TurnBinding(chat.tenant_id, chat.pk, last.thread_id, last.pk, chat.agent_id, tenant_a.member.pk)

    def images(send: bool) -> list[str | None]:
        store = DjangoRunStore(binding, send_images=send)
        state = store._load(50)  # (load_conversation's body, in this test's transaction)
        return [p.data for m in state.messages for p in m.parts if isinstance(p, ImagePart)]

    # Turn 1 is beyond the two newest turns: a placeholder; turns 2 and 3 go again.
    assert images(True) == [None, "Ag==", "Aw=="]
    # A model without vision gets placeholders only.
    assert images(False) == [None, None, None]
    store = DjangoRunStore(binding, send_images=True)
    texts = [p.text for m in store._load(50).messages for p in m.parts if isinstance(p, TextPart)]
    assert texts == ["question 1", "question 2", "question 3"]
