"""Chat attachments (E23): check an upload, keep an image with the session or put a
file into the uploader's own workspace, tie them to the message that carries them,
and read a turn's images back for the model.

Images are recognised by their first bytes (PNG, JPEG, GIF, WebP), never by the name
or the type the browser claims. Other files must have one of the text, document or
media (audio, video) suffixes below. Every cap is on the bytes actually read."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from agents.engine.types import ImagePart
from agents.models import Agent, Attachment, AttachmentKind, Session, Turn
from tools_app.workspace import OPEN, ensure_workspace, workspace_path

UPLOADS_DIR = "uploads"
# Uploads not sent yet (removed from the composer, or waiting) a member may have in a chat.
UNSENT_FACTOR = 3
FILE_SUFFIXES = frozenset(
    {
        ".txt",
        ".md",
        ".csv",
        ".tsv",
        ".json",
        ".yaml",
        ".yml",
        ".xml",
        ".html",
        ".log",
        ".pdf",
        ".py",
        ".js",
        ".sql",
        # Voice notes, audio and video from the chat platforms (kept as files for the tools).
        ".ogg",
        ".oga",
        ".opus",
        ".mp3",
        ".m4a",
        ".aac",
        ".wav",
        ".mp4",
        ".webm",
        ".mov",
    }
)
_IMAGE_SIGNATURES: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
    (b"WEBP", 8, "image/webp"),
)
_SUFFIX = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp"}
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._ -]+")


class AttachmentRefused(ValueError):
    """An upload or a message's attachments refused, with a reason a person can read."""


@dataclass(frozen=True)
class Upload:
    name: str
    content: bytes


def image_type(content: bytes) -> str | None:
    for signature, offset, media_type in _IMAGE_SIGNATURES:
        if content[offset : offset + len(signature)] == signature:
            if media_type == "image/webp" and not content.startswith(b"RIFF"):
                continue
            return media_type
    return None


def safe_name(name: str) -> str:
    base = Path(name.replace("\\", "/")).name
    cleaned = _UNSAFE_NAME.sub("_", base).strip(" .")[:100]
    return cleaned or "upload"


def _size(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MB" if n >= 1024 * 1024 else f"{n // 1024} KB"


def do_add_attachment(session: Session, user: Any, upload: Upload) -> Attachment:
    """Keep an image, or write a file into ``user``'s own workspace; not yet sent."""
    media_type = image_type(upload.content)
    unsent = Attachment._base_manager.filter(session_id=session.pk, turn__isnull=True, uploaded_by_id=user.pk)
    if unsent.count() >= UNSENT_FACTOR * settings.CLAW_CHAT_ATTACHMENTS_PER_MESSAGE:
        raise AttachmentRefused("Too many attachments wait to be sent in this chat: send a message first.")
    name = safe_name(upload.name)
    size = len(upload.content)
    if media_type is not None:
        if size > settings.CLAW_CHAT_IMAGE_MAX_BYTES:
            raise AttachmentRefused(
                f"{name} is {_size(size)}; images may be at most {_size(settings.CLAW_CHAT_IMAGE_MAX_BYTES)}."
            )
        return Attachment.objects.create(
            tenant_id=session.tenant_id,
            session=session,
            uploaded_by=user,
            kind=AttachmentKind.IMAGE,
            name=name,
            media_type=media_type,
            size=size,
            data=upload.content,
        )
    suffix = Path(name).suffix.lower()
    if suffix not in FILE_SUFFIXES:
        raise AttachmentRefused(
            f"{name}: this type of file cannot be attached. Images (PNG, JPEG, GIF, WebP) go to the model; "
            f"text, documents and media ({', '.join(sorted(FILE_SUFFIXES))}) go into your workspace."
        )
    if size > settings.CLAW_CHAT_FILE_MAX_BYTES:
        raise AttachmentRefused(
            f"{name} is {_size(size)}; files may be at most {_size(settings.CLAW_CHAT_FILE_MAX_BYTES)}."
        )
    agent = Agent._base_manager.get(pk=session.agent_id)
    if agent.agent_type != OPEN:
        raise AttachmentRefused(
            f"{agent.name} works in a workspace the team shares; files go only into your own workspace, "
            "so attach them in a chat with an agent that works in yours."
        )
    root = ensure_workspace(
        workspace_path(tenant_id=session.tenant_id, agent_id=agent.pk, agent_type=OPEN, user_id=user.pk)
    )
    folder = root / UPLOADS_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    target = _free_name(folder, name)
    target.write_bytes(upload.content)
    return Attachment.objects.create(
        tenant_id=session.tenant_id,
        session=session,
        uploaded_by=user,
        kind=AttachmentKind.FILE,
        name=name,
        media_type="application/octet-stream",
        size=size,
        workspace_path=f"{UPLOADS_DIR}/{target.name}",
    )


def _free_name(folder: Path, name: str) -> Path:
    target = folder / name
    stem, suffix = target.stem, target.suffix
    n = 1
    while target.exists():
        n += 1
        target = folder / f"{stem}-{n}{suffix}"
    return target


def unsent_attachments(session: Session, user: Any, ids: Iterable[Any]) -> list[Attachment]:
    """The caller's own not-yet-sent attachments of this session with these ids."""
    wanted = set()
    for value in ids:
        try:
            wanted.add(int(value))
        except (TypeError, ValueError):
            raise AttachmentRefused("Attachments are named by their ids.") from None
    if len(wanted) > settings.CLAW_CHAT_ATTACHMENTS_PER_MESSAGE:
        raise AttachmentRefused(
            f"At most {settings.CLAW_CHAT_ATTACHMENTS_PER_MESSAGE} attachments go with one message."
        )
    found = list(
        Attachment._base_manager.filter(
            pk__in=wanted, session_id=session.pk, tenant_id=session.tenant_id, uploaded_by_id=user.pk
        ).filter(turn__isnull=True)
    )
    if len(found) != len(wanted):
        raise AttachmentRefused("An attachment was not found: upload it again.")
    return found


def files_note(attachments: Iterable[Attachment]) -> str:
    """The line a message gets for its files: where the tools find them."""
    paths = [a.workspace_path for a in attachments if a.kind == AttachmentKind.FILE]
    if not paths:
        return ""
    return "\n\n(Attached to your workspace: " + ", ".join(paths) + ")"


def do_attach_to_turn(turn: Turn, attachment_ids: list[int]) -> None:
    if attachment_ids:
        with transaction.atomic():
            Attachment._base_manager.filter(pk__in=attachment_ids, tenant_id=turn.tenant_id).update(turn=turn)


def turn_images(turn_id: int, tenant_id: int) -> list[ImagePart]:
    """A turn's images, base64, in the order they were attached."""
    rows = Attachment._base_manager.filter(
        turn_id=turn_id, tenant_id=tenant_id, kind=AttachmentKind.IMAGE
    ).values_list("media_type", "data")
    return [ImagePart(media_type, base64.b64encode(bytes(data)).decode("ascii")) for media_type, data in rows]


def images_by_turn(turn_ids: Iterable[int], tenant_id: int) -> dict[int, list[ImagePart]]:
    out: dict[int, list[ImagePart]] = {}
    rows = (
        Attachment._base_manager.filter(
            turn_id__in=list(turn_ids), tenant_id=tenant_id, kind=AttachmentKind.IMAGE
        )
        .order_by("pk")
        .values_list("turn_id", "media_type", "data")
    )
    for turn_id, media_type, data in rows:
        out.setdefault(turn_id, []).append(
            ImagePart(media_type, base64.b64encode(bytes(data)).decode("ascii"))
        )
    return out


def do_attach_images(run: Any, images: Iterable[tuple[str, bytes]], user: Any) -> None:
    """Images that came with an API message (``/v1/chat/completions``), kept with the
    run's turn like the chat page's (inside the message's transaction)."""
    turn = Turn._base_manager.get(pk=run.turn_id)
    Attachment._base_manager.bulk_create(
        Attachment(
            tenant_id=turn.tenant_id,
            session_id=turn.session_id,
            turn=turn,
            uploaded_by=user if getattr(user, "pk", None) else None,
            kind=AttachmentKind.IMAGE,
            name=f"image-{n}{_SUFFIX.get(media_type, '')}",
            media_type=media_type,
            size=len(content),
            data=content,
        )
        for n, (media_type, content) in enumerate(images, start=1)
    )
