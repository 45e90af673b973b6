"""Attachments that come with a chat-platform message (E23 on every platform).

Inbound, an adapter reads a message's files within the caps (a platform's download
URL through the tenant's SSRF guard, :func:`download_files`; a platform API's own
steps with its credential, :func:`read_platform_files` — Telegram ``getFile``, Slack
``url_private_download``, WhatsApp's media URL, read after the webhook is answered
(``channels_app.receive``); a mail's MIME parts by the email adapter) into
:class:`InboundFile` values, and says why it left others out (``refused_files``). Once the update is stored and its session known,
:func:`store_message_files` keeps them like the web chat's uploads: images with the
session (to a vision model with the message), other files in the sender's own
workspace. Every cap is on the bytes actually read, never on a declared size; a
file left out is named in a short notice to the sender and in a note to the model,
and its metadata stays in the stored update, so nothing is lost silently.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings

from agents.actions.attachments import AttachmentRefused, Upload, do_add_attachment, files_note, safe_name
from channels_app.adapters.base import InboundFile

logger = logging.getLogger("claw.channels.attachments")

DOWNLOAD_TIMEOUT_SECONDS = 30.0
# All of one message's files: a Gateway connection reads its next frame only after
# the message is stored, and its heartbeats (about every 41 s) must stay answered.
DOWNLOAD_DEADLINE_SECONDS = 20.0


def per_message() -> int:
    return int(settings.CLAW_CHAT_ATTACHMENTS_PER_MESSAGE)


def attachment_cap() -> int:
    """The most bytes one attachment may have (the larger of the image and file caps;
    the smaller one is checked when the file is kept)."""
    return max(int(settings.CLAW_CHAT_IMAGE_MAX_BYTES), int(settings.CLAW_CHAT_FILE_MAX_BYTES))


def size_text(n: int) -> str:
    """``4 KB``, ``4.9 KB``, ``50 MB``: one decimal, so a size just over a cap reads as over it."""
    if n < 1024:
        return f"{n} bytes"
    value, unit = (n / (1024 * 1024), "MB") if n >= 1024 * 1024 else (n / 1024, "KB")
    shown = f"{value:.1f}".removesuffix(".0")
    if shown == f"{int(value)}" and value > int(value):
        shown = f"{value:.2f}"
    return f"{shown} {unit}"


def too_big(name: str, size: int | None = None, cap: int | None = None) -> str:
    cap = attachment_cap() if cap is None else cap
    what = f"{name} is {size_text(size)}" if size is not None else f"{name} is larger than that"
    return f"{what}; an attachment may be at most {size_text(cap)}."


def too_many(names: Iterable[str]) -> str:
    left = ", ".join(names)
    return f"At most {per_message()} attachments go with one message; not attached: {left}."


@dataclass(frozen=True)
class RemoteFile:
    """A file a platform offers for download: where, its name, the size it declares."""

    url: str
    name: str
    declared_size: int | None = None
    media_type: str = ""


def _fetched(name: str, got: Any, cap: int, media_type: str) -> InboundFile | str:
    """A file as read (``got``: its status, body, truncation and content type), or why
    it is left out."""
    if got.status != 200:
        return f"{name} could not be fetched (HTTP {got.status})."
    if got.truncated or len(got.body) > cap:
        return too_big(name, None, cap)
    if not got.body:
        return f"{name} is empty."
    return InboundFile(name, got.body, media_type or got.content_type)


async def download_files(tenant_id: int, remote: list[RemoteFile]) -> tuple[list[InboundFile], list[str]]:
    """Read each file (at most :func:`per_message`, all within
    ``DOWNLOAD_DEADLINE_SECONDS``) through the tenant's SSRF guard (every redirect
    checked again), at most the cap plus one byte read of each.
    A declared size over the cap is refused without a download; a body over the cap
    is refused whatever was declared."""
    from claw_platform.db import db_async
    from tools_app.guards.ssrf import BlockedDestination
    from tools_app.net.fetch import guarded_request
    from tools_app.net.transports import guarded_client
    from tools_app.runtime.network import guard_for_tenant

    if not remote:
        return [], []
    guard = await db_async(guard_for_tenant)(tenant_id)
    async with guarded_client(guard, timeout=DOWNLOAD_TIMEOUT_SECONDS) as client:

        def reader(item: RemoteFile) -> Callable[[int], Awaitable[Fetched]]:
            async def fetch(max_bytes: int) -> Fetched:
                try:
                    got = await guarded_request(client, guard, "GET", item.url, max_bytes=max_bytes)
                except BlockedDestination as exc:
                    logger.info("attachment %s refused by the SSRF guard: %s", item.name[:100], exc.message)
                    raise NotFetched("its address is not allowed") from None
                return Fetched(got.status, got.body, got.truncated, got.content_type)

            return fetch

        items = [PlatformFile(r.name, reader(r), r.declared_size, r.media_type) for r in remote]
        return await read_platform_files(items, deadline_seconds=DOWNLOAD_DEADLINE_SECONDS)


# Files of a webhook platform are read after the platform is answered (the update is
# stored first), so one message's files may take longer together.
BACKGROUND_DEADLINE_SECONDS = 60.0


@dataclass(frozen=True)
class Fetched:
    """What one download gave: the HTTP status, the bytes read (at most the cap plus
    one), whether the body went on past that, and its content type."""

    status: int
    body: bytes = b""
    truncated: bool = False
    content_type: str = ""


class NotFetched(Exception):
    """A file the platform would not hand over (said back as the reason)."""


@dataclass(frozen=True)
class PlatformFile:
    """A file a platform API hands over with its own steps (Telegram ``getFile``,
    WhatsApp's media URL, Slack's bearer download): ``fetch(max_bytes)`` reads it."""

    name: str
    fetch: Callable[[int], Awaitable[Fetched]]
    declared_size: int | None = None
    media_type: str = ""


async def read_capped(
    client: httpx.AsyncClient, url: str, max_bytes: int, headers: dict[str, str] | None = None
) -> Fetched:
    """GET ``url`` (no redirects followed: a credential never travels on), reading at
    most ``max_bytes`` of the body whatever its ``Content-Length`` says."""
    async with client.stream("GET", url, headers=headers or {}, follow_redirects=False) as response:
        content_type = response.headers.get("content-type", "").split(";")[0].strip()
        if response.status_code != 200:
            return Fetched(response.status_code, content_type=content_type)
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) >= max_bytes:
                return Fetched(200, bytes(body[:max_bytes]), True, content_type)
        return Fetched(200, bytes(body), False, content_type)


def same_origin(url: str, allowed: Iterable[str]) -> bool:
    """Whether ``url`` is on one of the ``allowed`` origins (``https://host[:port]``)."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}".lower()
    return any(origin == f"{urlsplit(a).scheme}://{urlsplit(a).netloc}".lower() for a in allowed)


async def read_platform_files(
    items: list[PlatformFile], *, deadline_seconds: float = BACKGROUND_DEADLINE_SECONDS
) -> tuple[list[InboundFile], list[str]]:
    """Read each file (at most :func:`per_message`, all within ``deadline_seconds``),
    at most the cap plus one byte of each: a declared size over the cap is refused
    without a download, a body over the cap whatever was declared."""
    cap = attachment_cap()
    files: list[InboundFile] = []
    refused: list[str] = []
    wanted, extra = items[: per_message()], items[per_message() :]
    if extra:
        refused.append(too_many(safe_name(r.name) for r in extra))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_seconds
    for item in wanted:
        name = safe_name(item.name)
        if item.declared_size is not None and item.declared_size > cap:
            refused.append(too_big(name, item.declared_size, cap))
            continue
        left = deadline - loop.time()
        if left <= 0:
            refused.append(f"{name} could not be fetched in time.")
            continue
        try:
            async with asyncio.timeout(left):
                got = await item.fetch(cap + 1)
        except TimeoutError:
            refused.append(f"{name} could not be fetched in time.")
            continue
        except NotFetched as exc:
            refused.append(f"{name} could not be fetched ({exc}).")
            continue
        except Exception as exc:  # every network failure ends as a readable note
            logger.info("attachment %s could not be fetched: %s", name, type(exc).__name__)
            refused.append(f"{name} could not be fetched ({type(exc).__name__}).")
            continue
        outcome = _fetched(name, got, cap, item.media_type)
        if isinstance(outcome, InboundFile):
            files.append(outcome)
        else:
            refused.append(outcome)
    return files, refused


@dataclass
class StoredFiles:
    ids: list[int]
    model_note: str  # appended to the message the model gets
    refused: list[str]  # said back to the sender


def store_message_files(
    session: Any, user: Any, files: Iterable[InboundFile], refused: Iterable[str]
) -> StoredFiles:
    """Keep a message's files for ``user`` in ``session`` (inside the dispatch's
    transaction); the ids to tie to the turn, and what was left out and why."""
    kept = []
    left_out = list(refused)
    for item in files:
        try:
            kept.append(do_add_attachment(session, user, Upload(item.name, item.content)))
        except AttachmentRefused as exc:
            left_out.append(str(exc))
    note = files_note(kept)
    if left_out:
        note += "\n\n(Not attached: " + " ".join(left_out) + ")"
    return StoredFiles([a.pk for a in kept], note, left_out)


def refusal_notice(refused: list[str]) -> str:
    if not refused:
        return ""
    return "Not attached: " + " ".join(refused)
