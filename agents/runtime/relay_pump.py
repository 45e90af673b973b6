"""One publisher per event loop for the events of every run on it.

A run never waits for its listeners: ``RunEventSink.emit`` queues the event here and
returns. The pump hands everything queued to the relay in one call and, while that
call is in flight, lets the next events queue; so an idle system relays each token
at once, and a busy one sends the deltas of two hundred streams in one channel-layer
statement instead of two hundred (one commit, one turn at PostgreSQL's NOTIFY lock).

Order: events leave in the order they were queued, except that a run's consecutive
text deltas in one batch become one event (their offsets keep that exact). Runs of
one session never interleave (one run per session at a time, and a run's last
events are relayed before it releases the session), so the merge only ever joins
deltas of one stream.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from claw_platform.loop_local import LoopLocal

logger = logging.getLogger("claw.runs.events")

RelayedEvent = tuple[int, int, str, dict[str, Any]]  # run id, seq, type, payload
EPHEMERAL_EVENTS = frozenset({"chunk", "thinking"})
MAX_MERGED_CHARS = 2_000  # a merged batch stays well inside a relayed message


class RunEventRelay(Protocol):
    """Pushes run events to live listeners (the WebSocket consumers)."""

    async def relay(self, run_id: int, seq: int, event_type: str, payload: dict[str, Any]) -> None: ...


class RelayPump:
    def __init__(self, relay: RunEventRelay) -> None:
        self.relay = relay
        self._queue: list[RelayedEvent | asyncio.Future[None]] = []
        self._task: asyncio.Task[None] | None = None

    def push(self, event: RelayedEvent) -> None:
        self._queue.append(event)
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._pump())

    async def flushed(self) -> None:
        """Return once everything pushed so far has been relayed."""
        marker: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(marker)
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._pump())
        await asyncio.shield(marker)

    async def _pump(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            events = merge_deltas([item for item in batch if not isinstance(item, asyncio.Future)])
            if events:
                try:
                    await relay_events(self.relay, events)
                except Exception:
                    # A listener's trouble never stops a run: stored events and the
                    # partial-text checkpoint let a client catch up with ``resume``.
                    logger.exception("relaying %d run events failed", len(events))
            for item in batch:
                if isinstance(item, asyncio.Future) and not item.done():
                    item.set_result(None)


async def relay_events(relay: RunEventRelay, events: list[RelayedEvent]) -> None:
    """Hand ``events`` to ``relay``: in one call when it takes several."""
    many = getattr(relay, "relay_many", None)
    if many is not None:
        await many(events)
        return
    for run_id, seq, event_type, payload in events:
        await relay.relay(run_id, seq, event_type, payload)


def merge_deltas(events: list[RelayedEvent]) -> list[RelayedEvent]:
    """A run's consecutive ``chunk`` (or ``thinking``) events of one stream become one
    event (up to ``MAX_MERGED_CHARS``): the texts joined, the first offset kept, at
    the place of the first. Any other event of the run ends the merging."""
    merged: list[RelayedEvent] = []
    open_delta: dict[int, int] = {}  # run id -> index in merged of its mergeable delta
    for event in events:
        run_id, seq, event_type, payload = event
        if event_type not in EPHEMERAL_EVENTS:
            open_delta.pop(run_id, None)
            merged.append(event)
            continue
        at = open_delta.get(run_id)
        if at is not None:
            _seq, last_type, last = merged[at][1:]
            last_text = last.get("text", "")
            text = payload.get("text", "")
            if (
                last_type == event_type
                and last.get("stream") == payload.get("stream")
                and last.get("offset", 0) + len(last_text) == payload.get("offset", 0)
                and len(last_text) + len(text) <= MAX_MERGED_CHARS
            ):
                merged[at] = (run_id, seq, event_type, {**last, "text": last_text + text})
                continue
        open_delta[run_id] = len(merged)
        merged.append(event)
    return merged


_pumps: LoopLocal[dict[RunEventRelay, RelayPump]] = LoopLocal(dict)


def relay_pump(relay: RunEventRelay) -> RelayPump:
    """The running loop's pump for ``relay``."""
    pumps = _pumps.get()
    pump = pumps.get(relay)
    if pump is None:
        pump = pumps[relay] = RelayPump(relay)
    return pump
