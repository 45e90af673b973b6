"""The one interface every chat-platform adapter implements (CH1).

An adapter turns a platform's HTTP request (or polled update) into
:class:`InboundMessage` values after checking its signature, and sends text,
attachments, typing and draft edits back in the platform's wire format. Every
failure to reach the platform is raised as the adapter's :class:`AdapterError`
subclass, whose ``retryable`` says whether trying again can help (a 429 or 5xx:
yes, after ``retry_after``; a 4xx: no).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

if TYPE_CHECKING:
    from channels_app.models import Channel

logger = logging.getLogger("claw.channels")
T = TypeVar("T")

MAX_REPLY_CHARS = 20_000  # the cap on a whole reply, whatever the platform (CH4)
TRUNCATED = "\n[… reply cut at 20,000 characters]"


class AdapterError(Exception):
    """A platform call failed. ``retryable``: whether the same call may succeed later
    (after ``retry_after`` seconds when the platform said so)."""

    platform = "platform"

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


class VerificationFailed(Exception):
    """The request is not the platform's: bad or missing signature, stale timestamp.
    ``status`` is the HTTP answer (401 missing, 403 wrong)."""

    def __init__(self, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class InboundFile:
    """A file that came with an inbound message, already read (within the caps)."""

    name: str
    content: bytes = field(repr=False)
    media_type: str = ""


@dataclass(frozen=True)
class InboundMessage:
    """One message (or button press) from a platform, normalised.

    ``platform_id`` de-duplicates (the platform's update or event id); the
    conversation is (``chat_id``, ``sender_id``, ``thread_id``); ``is_private`` for a
    direct chat; ``addressed`` when a group message mentions or replies to the bot.
    ``approval`` is set for a button press: ``(approval id, approved)``. ``files``:
    its attachments as read; ``refused_files``: why others were not read (over a
    cap, too many), said back to the sender and to the model. ``group_id``: the
    platform's id of several messages that are one (a Telegram album), gathered by
    :meth:`ChannelAdapter.combine` before they are answered."""

    platform_id: str
    chat_id: str
    sender_id: str
    text: str
    sender_name: str = ""
    thread_id: str = ""
    is_private: bool = True
    addressed: bool = False
    approval: tuple[str, bool] | None = None
    callback_id: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict)
    # Why the sender is not proven (email: no aligned DKIM signature …); "" when it is
    # or the platform vouches for it. An unproven sender never acts as a linked member.
    unverified: str = ""
    files: tuple[InboundFile, ...] = ()
    refused_files: tuple[str, ...] = ()
    group_id: str = ""
    # What came that the agent cannot take (``a location``, ``a poll``): the sender is
    # told so and nothing runs — never silence.
    unsupported: str = ""


@dataclass(frozen=True)
class Target:
    """Where a reply goes: a chat, and within it a thread (Slack ``thread_ts``,
    Telegram forum topic) when there is one."""

    chat_id: str
    thread_id: str = ""

    def as_json(self) -> dict[str, str]:
        return {"chat_id": self.chat_id, "thread_id": self.thread_id}


@dataclass(frozen=True)
class InboundRequest:
    """What an adapter needs of an HTTP request: the exact bytes and the headers
    (lower-cased names)."""

    body: bytes
    headers: Mapping[str, str]
    query: Mapping[str, str] = field(default_factory=dict)
    method: str = "POST"


@dataclass(frozen=True)
class Immediate:
    """An answer the platform expects at once instead of ``200 {}`` (Slack's URL
    verification challenge, WhatsApp's subscribe challenge)."""

    status: int
    body: bytes
    content_type: str = "application/json"


@dataclass(frozen=True)
class ApprovalPrompt:
    approval_id: str
    tool: str
    summary: str


def split_message(text: str, limit: int, *, cap: int = MAX_REPLY_CHARS) -> list[str]:
    """``text`` cut to at most ``cap`` characters and split into parts of at most
    ``limit``: at a paragraph break, else a line break, else a space, else hard."""
    if len(text) > cap:
        text = text[: cap - len(TRUNCATED)] + TRUNCATED
    parts: list[str] = []
    rest = text
    while len(rest) > limit:
        window = rest[:limit]
        cut = max(window.rfind("\n\n"), -1)
        if cut < limit // 2:
            cut = window.rfind("\n")
        if cut < limit // 2:
            cut = window.rfind(" ")
        if cut <= 0:
            cut = limit
        parts.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip("\n ")
    if rest or not parts:
        parts.append(rest)
    return [p for p in parts if p] or [""]


class ChannelAdapter:
    """Base of every adapter. Subclasses set ``kind``, ``max_message_chars``,
    ``can_edit`` and ``error_type`` and implement the platform calls."""

    kind = ""
    max_message_chars = 4000
    can_edit = False
    has_buttons = False
    error_type: type[AdapterError] = AdapterError
    timeout = 15.0

    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    # -------------------------------------------------------------- inbound

    def verify(self, request: InboundRequest) -> None:
        """Raise :class:`VerificationFailed` unless the request is the platform's."""
        raise NotImplementedError

    def decode(self, request: InboundRequest) -> Any:
        """The request's payload when it is not a JSON body (None: parse the body as JSON)."""
        return None

    def immediate_answer(self, request: InboundRequest, payload: Any) -> Immediate | None:
        """An answer the platform expects instead of the usual acknowledgement."""
        return None

    def acknowledgement(self, payload: Any) -> Immediate | None:
        """The answer once the update is stored (None: ``200 {"ok": true}``)."""
        return None

    def subscribe_challenge(self, request: InboundRequest) -> Immediate | None:
        """The answer to a ``GET`` subscription check (WhatsApp); None: not offered."""
        return None

    def parse(self, request: InboundRequest, payload: Any) -> list[InboundMessage]:
        """The messages in a verified request (none: an event the agent ignores)."""
        raise NotImplementedError

    def restore(self, raw: Mapping[str, Any]) -> InboundMessage | None:
        """The message again from its stored ``raw`` (an update stored but never
        dispatched: the process died), as :meth:`parse` first made it; None when the
        stored form cannot give it back whole (then the sender is asked to resend).
        Never a message with a sender proof the stored form does not carry."""
        return None

    def combine(self, parts: list[InboundMessage]) -> InboundMessage:
        """One message of the parts of a group (in the order they came): the first's
        conversation, every part's words, addressed when any part is."""
        first = parts[0]
        text = "\n\n".join(p.text.strip() for p in parts if p.text.strip())
        return replace(
            first,
            text=text,
            addressed=any(p.addressed for p in parts),
            raw={**first.raw, "group": [dict(p.raw) for p in parts]},
        )

    def offers_files(self, message: InboundMessage) -> bool:
        """Whether the message carries files still to be read (by :meth:`fetch_files`
        once it is stored, after the platform is answered)."""
        return False

    async def fetch_files(self, message: InboundMessage) -> InboundMessage:
        """The message with its files read (``files``) or the reasons they were not
        (``refused_files``)."""
        return message

    # -------------------------------------------------------------- outbound

    async def send_text(self, target: Target, text: str) -> str:
        """Send one message of at most ``max_message_chars``; its platform id."""
        raise NotImplementedError

    async def send_keyed(self, target: Target, text: str, key: str) -> str:
        """Send one part of an outbound reply, carrying ``key`` (unique to that part,
        the same on every try) where the platform lets a repeat be recognised:
        Discord's ``nonce``, Slack's message metadata, the Message-ID of a mail, the
        generic webhook's delivery id. Elsewhere (Telegram, WhatsApp) the same as
        :meth:`send_text`."""
        return await self.send_text(target, text)

    async def find_sent(self, target: Target, key: str, since: float) -> str:
        """The id of a message carrying ``key`` that the platform already holds (sent
        after ``since``, a Unix time), "" when there is none or the platform cannot
        tell. Asked before a part is sent again after a cut-off try."""
        return ""

    async def edit_text(self, target: Target, message_id: str, text: str) -> None:
        raise self.error_type(f"{self.kind} cannot edit messages", retryable=False)

    async def send_typing(self, target: Target) -> None:
        return None

    async def send_attachment(self, target: Target, name: str, content: bytes, caption: str = "") -> str:
        raise self.error_type(f"{self.kind} cannot send attachments", retryable=False)

    async def send_approval(self, target: Target, prompt: ApprovalPrompt, key: str = "") -> str:
        """Ask for an approval: buttons where the platform has them, else text that
        says how to answer by reply. ``key``: as for :meth:`send_keyed`."""
        if key:
            return await self.send_keyed(target, approval_text(prompt), key)
        return await self.send_text(target, approval_text(prompt))

    async def acknowledge_button(self, message: InboundMessage, text: str) -> None:
        return None

    async def send_reply(self, target: Target, text: str) -> list[str]:
        """A whole reply, split to the platform's limits (20,000 characters at most)."""
        return [await self.send_text(target, part) for part in split_message(text, self.max_message_chars)]

    # -------------------------------------------------------------- helpers

    def error_from_response(self, response: httpx.Response, what: str) -> AdapterError:
        retry_after: float | None = None
        header = response.headers.get("retry-after", "")
        if header.isdigit():
            retry_after = float(header)
        status = response.status_code
        retryable = status == 429 or status >= 500
        return self.error_type(
            f"{self.kind} {what}: HTTP {status}", retryable=retryable, retry_after=retry_after
        )

    def error_from_transport(self, exc: httpx.HTTPError, what: str) -> AdapterError:
        return self.error_type(f"{self.kind} {what}: {type(exc).__name__}", retryable=True)


# What a payload of the wrong shape raises in a parser (a string where an object
# belongs, a missing key, a list for a number …).
MALFORMED = (AttributeError, TypeError, KeyError, IndexError, ValueError)


def parsed_or_skipped(parse: Callable[[], T], what: str, default: T) -> T:
    """``parse()``; ``default`` (logged) when the update is not in the platform's
    format: skipped, never a crash of the poller that holds the channel."""
    try:
        return parse()
    except MALFORMED as exc:
        logger.warning(
            "%s: an update not in the platform's format was skipped (%s)", what, type(exc).__name__
        )
        return default


_LABEL_UNSAFE = re.compile(r"[\x00-\x1f\x7f\[\]]+")


def duration_text(seconds: float) -> str:
    """``0:07``, ``3:25``, ``1:02:03``."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def media_label(kind: str, seconds: Any = None, detail: Any = "") -> str:
    """What a message carried that its words do not say, for the model and the
    stored text: ``[voice note, 0:07]``, ``[sticker: 👍]``, ``[audio: Artist - Title, 3:25]``."""
    shown = _LABEL_UNSAFE.sub(" ", str(detail or "")).strip()[:60]
    parts = [f"{kind}: {shown}" if shown else kind]
    if isinstance(seconds, int | float) and not isinstance(seconds, bool) and 0 <= seconds < 10**7:
        parts.append(duration_text(seconds))
    return "[" + ", ".join(parts) + "]"


def labelled(label: str, text: str) -> str:
    """``text`` after the label of what came with it (either may be empty)."""
    if not label:
        return text
    return f"{label}\n{text}" if text.strip() else label


def approval_text(prompt: ApprovalPrompt) -> str:
    return (
        f"Approval needed: {prompt.tool}\n{prompt.summary}\n\n"
        "Reply “yes” (or /approve) to run it, “no” (or /deny) to refuse."
    )


def header(headers: Mapping[str, str], name: str) -> str:
    return headers.get(name.lower(), "")


def within_window(timestamp: str, window: float) -> bool:
    if not timestamp.isdigit() or len(timestamp) > 12:
        return False
    return abs(time.time() - int(timestamp)) <= window


def first(values: Sequence[Any], default: Any = None) -> Any:
    return values[0] if values else default
