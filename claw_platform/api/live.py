"""Following runs live, without a thread per listener (U5, A2 wait/stream modes).

A listener subscribes to a channel-layer group (the session's, where
``channels_app.relay`` publishes every event of its runs, or the tenant's, where it
publishes every stored event) and reads stored events from the database: first what
happened before it subscribed, then again whenever a relayed event shows a gap or
nothing arrived for a while. So a lost, late or duplicated layer message costs at
most a poll interval, never an event; chunks (not stored) are only ever live.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from channels.layers import get_channel_layer
from django.core.serializers.json import DjangoJSONEncoder

from agents.actions.run_snapshot import run_from_snapshot
from agents.models import FINISHED_RUN_STATUSES, Run, RunEvent, RunStatus
from agents.runtime.events import EPHEMERAL_EVENTS
from channels_app.relay import event_frame, relayed_frame, session_group, tenant_group
from claw_platform.api.settled import settled_listener
from claw_platform.db import db_async
from claw_platform.tenancy.member_rule import Caller, visible_to

# Events after which a run's stream ends: finished, or paused for a person.
END_EVENTS = frozenset({"run.completed", "run.failed", "run.cancelled", "approval_needed"})
SETTLED_STATUSES = frozenset({*FINISHED_RUN_STATUSES, RunStatus.AWAITING_APPROVAL})
POLL_SECONDS = 1.0
SETTLE_POLL_SECONDS = 5.0  # a waiter re-reads its run this often, notification or not
KEEPALIVE_SECONDS = 15.0


def _db(fn: Any) -> Any:
    return db_async(fn)


class GroupListener:
    """One channel on the layer, subscribed to ``group`` until closed."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.layer = get_channel_layer()
        self.channel: str | None = None

    async def __aenter__(self) -> GroupListener:
        if self.layer is not None:
            self.channel = await self.layer.new_channel()
            await self.layer.group_add(self.group, self.channel)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.layer is not None and self.channel is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.layer.group_discard(self.group, self.channel))
            release = getattr(self.layer, "release_channel", None)
            if release is not None:
                release(self.channel)

    async def receive(self, wait: float) -> dict[str, Any] | None:
        """The next frame relayed to the group, or None after ``wait`` seconds."""
        if self.layer is None or self.channel is None:
            await asyncio.sleep(wait)
            return None
        try:
            message = await asyncio.wait_for(self.layer.receive(self.channel), wait)
        except TimeoutError:
            return None
        return relayed_frame(message) if isinstance(message, dict) else None


@dataclass
class RunState:
    status: str
    event_seq: int


def _run_state(run_id: int) -> RunState | None:
    row = Run._base_manager.filter(pk=run_id).values_list("status", "event_seq").first()
    return RunState(row[0], row[1]) if row else None


def _stored_after(run_id: int, seq: int) -> list[dict[str, Any]]:
    return [
        event_frame(run_id, s, t, p)
        for s, t, p in RunEvent._base_manager.filter(run_id=run_id, seq__gt=seq)
        .order_by("seq")
        .values_list("seq", "type", "payload")[:1000]
    ]


async def follow_run(
    run_id: int,
    session_id: Any,
    *,
    after: int = 0,
    chunks: bool = True,
    deadline: float,
    still_allowed: Callable[[], bool] = lambda: True,
) -> AsyncIterator[dict[str, Any]]:
    """The run's events after ``after`` as frames ``{type, run, seq, payload}``, live,
    until the run finishes or pauses for approval, ``deadline`` (monotonic) passes,
    or ``still_allowed()`` says no (the caller's key was revoked ...)."""
    last = after
    async with GroupListener(session_group(session_id)) as listener:
        stored = await _db(_stored_after)(run_id, last)
        for frame in stored:
            last = frame["seq"]
            yield frame
            if frame["type"] in END_EVENTS:
                return
        while time.monotonic() < deadline and still_allowed():
            frame = await listener.receive(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))
            if frame is not None and frame.get("run") != run_id:
                continue
            if frame is not None and frame["type"] in EPHEMERAL_EVENTS:
                if chunks:
                    yield frame
                continue
            if frame is not None and frame.get("seq") == last + 1:
                last = frame["seq"]
                yield frame
                if frame["type"] in END_EVENTS:
                    return
                continue
            if frame is not None and frame.get("seq", 0) <= last:
                continue  # delivered twice, or already read from the database
            # A gap or a quiet interval: the database has the truth.
            for stored_frame in await _db(_stored_after)(run_id, last):
                last = stored_frame["seq"]
                yield stored_frame
                if stored_frame["type"] in END_EVENTS:
                    return
            if frame is None:
                state = await _db(_run_state)(run_id)
                if state is None or (state.status in SETTLED_STATUSES and state.event_seq <= last):
                    return


async def settle_run(run_id: int, *, deadline: float, queued_at: float | None = None) -> Run | None:
    """Wait until the run is finished or awaits approval (its row says so), or the
    deadline passes; returns the run as stored then. Woken by the worker's NOTIFY
    (``claw_platform.api.settled``), not by the run's event stream: a waiting call
    costs no channel-layer traffic however much the run streams.

    ``queued_at`` (monotonic, taken before the transaction that queued the run
    committed): when this process has listened without a break since then, no settle
    can have been missed, so the row is not read before waiting."""
    listener = settled_listener()
    await listener.ready()
    trust_notifications = queued_at is not None and listener.listening_since(queued_at)
    while True:
        woken = listener.register(run_id, recent=trust_notifications)
        try:
            run: Run | None = None
            if not trust_notifications:
                run = await _db(_settled_row)(run_id)
                if run is None or run.status in SETTLED_STATUSES:
                    return run
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return run if run is not None else await _db(_settled_row)(run_id)
            trust_notifications = False  # after a wake without rows, or a poll: read them
            with contextlib.suppress(TimeoutError):
                snapshot = await asyncio.wait_for(woken, min(SETTLE_POLL_SECONDS, remaining))
                if snapshot is not None:
                    # The rows as the settling transaction committed them: no read.
                    return run_from_snapshot(snapshot)
        finally:
            listener.unregister(run_id, woken)


def _settled_row(run_id: int) -> Run | None:
    return Run._base_manager.select_related("turn").filter(pk=run_id).first()  # type: ignore[no-any-return]


def _tenant_events_after(caller: Caller, event_id: int, limit: int = 500) -> list[tuple[int, dict[str, Any]]]:
    rows = (
        visible_to(RunEvent._base_manager.filter(pk__gt=event_id), caller)
        .order_by("pk")
        .values_list("pk", "run_id", "seq", "type", "payload", "run__session_id")[:limit]
    )
    return [
        (pk, {**event_frame(run_id, seq, kind, payload), "session": str(session_id)})
        for pk, run_id, seq, kind, payload, session_id in rows
    ]


def latest_tenant_event_id(tenant_id: int) -> int:
    """Where a new stream starts: the tenant's newest event (a cursor, never sent;
    what follows it is cut to what the caller sees)."""
    return (
        RunEvent._base_manager.filter(tenant_id=tenant_id)
        .order_by("-pk")
        .values_list("pk", flat=True)
        .first()
        or 0
    )


async def follow_tenant(
    caller: Caller, *, after_id: int, deadline: float, still_allowed: Callable[[], bool] = lambda: True
) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    """The stored run events of the caller's tenant that the caller sees (the member
    rule: a member's own sessions' only) with an id above ``after_id``, oldest first,
    live until ``deadline`` or until ``still_allowed()`` says no; yields
    ``(event id, frame)``, and ``(0, {})`` as a keep-alive tick when nothing
    happened for a while."""
    last = after_id
    quiet_since = time.monotonic()
    async with GroupListener(tenant_group(caller.tenant_id)) as listener:
        while time.monotonic() < deadline and still_allowed():
            rows = await _db(_tenant_events_after)(caller, last)
            for event_id, frame in rows:
                last = event_id
                yield event_id, frame
            if rows:
                quiet_since = time.monotonic()
                if len(rows) == 500:
                    continue
            elif time.monotonic() - quiet_since >= KEEPALIVE_SECONDS:
                quiet_since = time.monotonic()
                yield 0, {}
            await listener.receive(min(POLL_SECONDS * 2, max(0.0, deadline - time.monotonic())))


def sse(event: str | None, data: Any, event_id: Any = None) -> bytes:
    """One server-sent event."""
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if event:
        lines.append(f"event: {event}")
    payload = (
        data if isinstance(data, str) else json.dumps(data, cls=DjangoJSONEncoder, separators=(",", ":"))
    )
    lines.extend(f"data: {line}" for line in payload.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
