"""Replies back to the platform (CH1, U4, C6).

:func:`deliver_run` follows a run's events (``claw_platform.api.live.follow_run``):
on a platform that can edit, the reply grows in place as it streams (a draft edited
every ``DRAFT_STEP_CHARS`` new characters, at most once per
``DRAFT_MIN_INTERVAL`` seconds: within Telegram's and Slack's rate limits); elsewhere
it is sent when complete. The final text replaces the draft and is split to the
platform's limits (20,000 characters at most). A call waiting for approval is asked
for with buttons where the platform has them, else as text saying how to reply.

Platform errors: a retryable one (429, 5xx, a dropped connection) is retried with
backoff (``Retry-After`` honoured) up to ``SEND_ATTEMPTS`` times; one that is not is
logged and recorded on the update, never crashing the loop that delivers.

:func:`deliver_to_channel` sends a text to a channel's chat from anywhere (routines,
C6). Every text goes out as an outbound reply (``channels_app.outbox``): a platform
outage postpones it to a worker's sweep instead of losing it. :func:`start_delivery` runs a delivery on this process's background loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from django.conf import settings

from agents.models import ApprovalRequest, ApprovalStatus, Run, RunStatus
from channels_app.adapters import adapter_for
from channels_app.adapters.base import AdapterError, ApprovalPrompt, ChannelAdapter, Target, split_message
from channels_app.models import Channel, InboundUpdate
from claw_platform.background_loop import submit
from claw_platform.db import db_async

logger = logging.getLogger("claw.channels.delivery")

DRAFT_STEP_CHARS = 80
DRAFT_MIN_INTERVAL = 1.0
SEND_ATTEMPTS = 4
RUN_FOLLOW_SECONDS = 1800.0
T = TypeVar("T")

_tasks: set[asyncio.Task[Any]] = set()


async def with_retries(call: Callable[[], Awaitable[T]], *, attempts: int = SEND_ATTEMPTS) -> T:
    """``call()``, retried while its error says a retry can help."""
    delay = 0.5
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except AdapterError as exc:
            if not exc.retryable or attempt == attempts:
                raise
            wait = min(exc.retry_after if exc.retry_after is not None else delay, 30.0)
            logger.info("platform busy, retrying in %.1fs: %s", wait, exc)
            await asyncio.sleep(wait)
            delay *= 2
    raise AssertionError("unreachable")


class Draft:
    """A reply that grows in place: the first text is sent, then edited."""

    def __init__(
        self,
        adapter: ChannelAdapter,
        target: Target,
        *,
        update_id: int | None = None,
        run_id: int | None = None,
    ) -> None:
        self.adapter = adapter
        self.target = target
        self.update_id = update_id
        self.run_id = run_id
        self.message_id = ""
        self.shown = ""
        self.text = ""
        self.last_edit = 0.0

    async def grow(self, delta: str) -> None:
        self.text += delta
        if not self.adapter.can_edit:
            return
        due = len(self.text) - len(self.shown) >= DRAFT_STEP_CHARS
        if not due or time.monotonic() - self.last_edit < DRAFT_MIN_INTERVAL:
            return
        await self._show(self.text[: self.adapter.max_message_chars - 2] + " …")

    async def _show(self, text: str) -> None:
        self.last_edit = time.monotonic()
        try:
            if not self.message_id:
                self.message_id = await self.adapter.send_text(self.target, text)
            else:
                await self.adapter.edit_text(self.target, self.message_id, text)
            self.shown = text
        except AdapterError as exc:
            # A draft is best effort: the final text still goes out.
            logger.info("draft update skipped: %s", exc)

    async def finish(self, final: str) -> list[str]:
        """The final text: the draft edited to its first part, the rest sent. Kept
        as an outbound reply until every part is delivered (``channels_app.outbox``):
        when the platform stays busy, a worker's sweep sends the rest later."""
        from channels_app.outbox import create_outbound, send_outbound

        parts = split_message(final or "(no reply)", self.adapter.max_message_chars)
        row_id = await db_async(create_outbound)(
            self.adapter.channel,
            self.target,
            parts,
            draft_message_id=self.message_id,
            update_id=self.update_id,
            run_id=self.run_id,
        )
        return await send_outbound(row_id, self.adapter)


def _load_channel(channel_id: int) -> Channel:
    return Channel.objects.unscoped().select_related("agent").get(pk=channel_id)


def _run_outcome(run_id: int) -> tuple[str, str, str]:
    run = Run._base_manager.select_related("turn").get(pk=run_id)
    turn = run.turn
    return str(run.status), (turn.response_text if turn else ""), (run.error or (turn.error if turn else ""))


def _pending_approvals(run_id: int) -> list[ApprovalPrompt]:
    rows = ApprovalRequest._base_manager.filter(run_id=run_id, status=ApprovalStatus.PENDING).order_by("pk")
    return [
        ApprovalPrompt(
            str(a.pk),
            a.tool_name,
            "\n".join(
                p for p in [json.dumps(a.arguments, ensure_ascii=False)[:400], a.request_reason[:300]] if p
            ),
        )
        for a in rows
    ]


def _note_failure(update_id: int | None, detail: str) -> None:
    if update_id is not None:
        InboundUpdate.objects.unscoped().filter(pk=update_id).update(detail=detail[:500])


async def deliver_run(
    channel_id: int,
    target: Target,
    run_id: int,
    session_id: Any,
    *,
    after: int = 0,
    update_id: int | None = None,
) -> None:
    """Follow the run (its events after ``after``: a run resumed by a decision is
    followed from there) and send its reply, or its approval prompts, to ``target``."""
    from claw_platform.api.live import follow_run

    channel = await db_async(_load_channel)(channel_id)
    adapter = adapter_for(channel)
    draft = Draft(adapter, target, update_id=update_id, run_id=run_id)
    try:
        with contextlib.suppress(AdapterError):
            await adapter.send_typing(target)
        deadline = time.monotonic() + RUN_FOLLOW_SECONDS
        async for frame in follow_run(run_id, session_id, after=after, deadline=deadline):
            if frame["type"] == "chunk":
                await draft.grow(str((frame.get("payload") or {}).get("text", "")))
        status, text, error = await db_async(_run_outcome)(run_id)
        if status == RunStatus.AWAITING_APPROVAL:
            if draft.text.strip():
                await draft.finish(draft.text)
            prompts = await db_async(_pending_approvals)(run_id)
            if prompts:
                # Kept as an outbound reply too: a platform outage leaves them to the sweep.
                from channels_app.outbox import create_outbound, send_outbound

                parts = [{"approval": dataclasses.asdict(p)} for p in prompts]
                row_id = await db_async(create_outbound)(
                    channel, target, parts, update_id=update_id, run_id=run_id
                )
                await send_outbound(row_id, adapter)
            return
        if status == RunStatus.COMPLETED:
            await draft.finish(text)
        elif status == RunStatus.FAILED:
            await draft.finish(f"Sorry, that failed: {error or 'the run failed'}")
        elif status == RunStatus.CANCELLED:
            await draft.finish((draft.text + "\n\n" if draft.text else "") + "(stopped)")
        else:
            logger.warning("run %s still %s when delivery gave up", run_id, status)
    except AdapterError as exc:
        logger.warning("delivery of run %s to %s failed: %s", run_id, channel.kind, exc)
        later = getattr(exc, "sweep_retries", False)
        await db_async(_note_failure)(update_id, f"delivery {'postponed' if later else 'failed'}: {exc}")
    except Exception:
        logger.exception("delivery of run %s failed", run_id)
        await db_async(_note_failure)(update_id, "delivery failed: internal error")


async def deliver_text(
    channel_id: int, target: Target, text: str, *, update_id: int | None = None
) -> list[str]:
    """Send ``text`` (a notice, a command's answer, a routine's output), split to the
    platform's limits, as an outbound reply (``channels_app.outbox``): the platform's
    message ids. When the platform stays busy the adapter's error is raised with
    ``sweep_retries`` set and a worker's sweep sends the rest later; an error no
    retry can help is raised as is (the reply is marked failed)."""
    from channels_app.outbox import create_outbound, send_outbound

    channel = await db_async(_load_channel)(channel_id)
    adapter = adapter_for(channel)
    parts = split_message(text, adapter.max_message_chars)
    row_id = await db_async(create_outbound)(channel, target, parts, update_id=update_id)
    try:
        return await send_outbound(row_id, adapter)
    except AdapterError as exc:
        later = getattr(exc, "sweep_retries", False)
        logger.warning("sending to %s %s: %s", channel.kind, "postponed" if later else "failed", exc)
        await db_async(_note_failure)(update_id, f"delivery {'postponed' if later else 'failed'}: {exc}")
        raise


async def answer_command(
    channel_id: int, target: Target, session_id: Any, command: str, *, update_id: int | None = None
) -> None:
    """A slash command (``/new``, ``/model`` …), answered inline like the web chat."""
    from agents.runtime.chat import handle_message

    try:
        reply = await handle_message(session_id, command)
        await deliver_text(channel_id, target, reply.text or "Done.", update_id=update_id)
    except AdapterError:
        pass
    except Exception:
        logger.exception("command %s failed", command[:40])


def start_delivery(coro: Awaitable[Any]) -> None:
    """Run ``coro`` on this process's background loop without holding up the loop's
    queue (it runs in order: a delivery lasts as long as its run)."""

    async def spawn() -> None:
        task = asyncio.ensure_future(coro)
        _tasks.add(task)
        task.add_done_callback(_tasks.discard)

    submit(spawn())


def deliver_to_channel(channel: Channel | int, target: str | Target, text: str) -> list[str]:
    """Send ``text`` to ``target`` (a chat id, or a :class:`Target`) on ``channel``,
    split to the platform's limits; waits, returns the platform's message ids and
    raises the adapter's error when it could not (C6: routine output). An error with
    ``sweep_retries`` set means the text is kept and a worker's sweep sends it later."""
    channel_id = channel if isinstance(channel, int) else channel.pk
    where = target if isinstance(target, Target) else Target(str(target))
    future = submit(deliver_text(channel_id, where, text))
    return list(future.result(timeout=float(getattr(settings, "CLAW_CHANNEL_SEND_TIMEOUT", 120))))
