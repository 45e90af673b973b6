"""The run's EventSink: numbers events per run, stores all but ``chunk``/``thinking``
as RunEvent rows, and hands every event to a relay (the channel layer, later).

Sequence numbers: each stored event takes the next number (the run's ``event_seq``
is advanced in the same statement as the insert). ``chunk`` and ``thinking`` carry
the number of the latest stored event without advancing it: they are not kept (the
turn's partial text is), so a client that reconnects asks ``events_after`` its last
stored number and reads the partial text from the turn.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any, Protocol

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from psycopg.types.json import Jsonb

from agents.models import Run, RunEvent
from claw_platform.background_loop import submit
from claw_platform.db import db_async

logger = logging.getLogger("claw.runs.events")

EPHEMERAL_EVENTS = frozenset({"chunk", "thinking"})
TERMINAL_EVENTS = frozenset({"run.completed", "run.failed", "run.cancelled"})
# Events that tell a listener the run has settled (finished, or paused for approval).
# They are stored at once but relayed only once the worker has written the run's
# final status (``drain``): whoever reacts to them (an API call in ``wait`` mode, an
# approval button) finds the run row, and its approval requests, already settled.
SETTLING_EVENTS = TERMINAL_EVENTS | {"approval_needed"}
DRAIN_SECONDS = 10.0  # how long a finished run waits for its last events to be relayed


class RunEventRelay(Protocol):
    """Pushes a run's events to live listeners (the WebSocket consumers)."""

    async def relay(self, run_id: int, seq: int, event_type: str, payload: dict[str, Any]) -> None: ...


class NullRelay:
    async def relay(self, run_id: int, seq: int, event_type: str, payload: dict[str, Any]) -> None:
        return None


_relay: RunEventRelay = NullRelay()


def set_relay(relay: RunEventRelay | None) -> None:
    """Install the process's relay (``None``: back to the no-op relay)."""
    global _relay
    _relay = relay or NullRelay()


def current_relay() -> RunEventRelay:
    return _relay


# One round trip: advance the run's counter and insert the event under it.
_STORE_EVENT_SQL = """
WITH r AS (
    UPDATE agents_run SET event_seq = %(seq)s WHERE id = %(run)s AND event_seq < %(seq)s RETURNING id
)
INSERT INTO agents_runevent (tenant_id, run_id, seq, type, payload, created_at)
VALUES (%(tenant)s, %(run)s, %(seq)s, %(type)s, %(payload)s, now())
"""


# Outside a worker: the next number under the run's row lock (the UPDATE takes it
# until the transaction ends), and the event, in one round trip.
_STORE_NEXT_EVENT_SQL = """
WITH r AS (
    UPDATE agents_run SET event_seq = event_seq + 1 WHERE id = %(run)s RETURNING event_seq
)
INSERT INTO agents_runevent (tenant_id, run_id, seq, type, payload, created_at)
SELECT %(tenant)s, %(run)s, r.event_seq, %(type)s, %(payload)s, now() FROM r
RETURNING seq
"""


def _json_safe(payload: dict[str, Any]) -> Any:
    # Payloads come from the engine (Decimals as strings already); be lenient anyway.
    return Jsonb(payload, dumps=lambda v: DjangoJSONEncoder().encode(v))


class RunEventSink:
    """``EventSink`` for one run on one worker. Only the worker holding the run's
    lease emits, so the counter lives here, seeded from the run's ``event_seq``.

    Relaying never holds the run up: events go to an outbox that one task per run
    publishes in order. When the layer is idle each delta goes out at once (a token
    reaches the browser in one hop); when a publish is still in flight, the deltas
    that arrive meanwhile are merged into one message (their offsets make that
    exact). So the relay batches exactly as much as the layer's speed requires,
    instead of a fixed 40 ms (``batches_deltas``: the engine hands every delta over).
    """

    batches_deltas = True

    def __init__(self, run_id: int, tenant_id: int, *, last_seq: int, relay: RunEventRelay | None = None):
        self.run_id = run_id
        self.tenant_id = tenant_id
        self.seq = last_seq
        self.relay = relay or current_relay()
        self._outbox: list[tuple[int, str, dict[str, Any]]] = []
        self._held: list[tuple[int, str, dict[str, Any]]] = []
        self._publisher: asyncio.Task[None] | None = None

    async def emit(self, event_type: str, payload: dict[str, Any]) -> None:
        if event_type not in EPHEMERAL_EVENTS:
            self.seq += 1
            await db_async(self._store)(self.seq, event_type, payload)
        event = (self.seq, event_type, {**payload, "run_id": self.run_id})
        if event_type in SETTLING_EVENTS:
            self._held.append(event)
            return
        self._outbox.append(event)
        self._start_publisher()

    def _start_publisher(self) -> None:
        if self._publisher is None or self._publisher.done():
            self._publisher = asyncio.ensure_future(self._publish())

    async def drain(self) -> None:
        """Relay the settling events held back, then wait until everything emitted so
        far has been relayed (end of a run, after its status is written)."""
        if self._held:
            self._outbox.extend(self._held)
            self._held = []
            self._start_publisher()
        if self._publisher is not None and not self._publisher.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._publisher), DRAIN_SECONDS)
            except TimeoutError:
                logger.warning("relaying the last events of run %s timed out", self.run_id)

    async def _publish(self) -> None:
        while self._outbox:
            batch, self._outbox = merge_deltas(self._outbox), []
            for seq, event_type, payload in batch:
                try:
                    await self.relay.relay(self.run_id, seq, event_type, payload)
                except Exception:
                    # A listener's trouble never stops the run: stored events and the
                    # partial-text checkpoint let a client catch up with ``resume``.
                    logger.exception("relaying %s of run %s failed", event_type, self.run_id)

    def _store(self, seq: int, event_type: str, payload: dict[str, Any]) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                _STORE_EVENT_SQL,
                {
                    "tenant": self.tenant_id,
                    "run": self.run_id,
                    "seq": seq,
                    "type": event_type[:40],
                    "payload": _json_safe(payload),
                },
            )


MAX_MERGED_CHARS = 2_000  # a merged batch stays well inside a relayed message


def merge_deltas(events: list[tuple[int, str, dict[str, Any]]]) -> list[tuple[int, str, dict[str, Any]]]:
    """Consecutive ``chunk`` (or ``thinking``) events of one stream become one event
    (up to ``MAX_MERGED_CHARS``): the texts joined, the first offset kept."""
    merged: list[tuple[int, str, dict[str, Any]]] = []
    for seq, event_type, payload in events:
        if merged and event_type in EPHEMERAL_EVENTS:
            _last_seq, last_type, last = merged[-1]
            if (
                last_type == event_type
                and last.get("stream") == payload.get("stream")
                and last.get("offset", 0) + len(last.get("text", "")) == payload.get("offset", 0)
                and len(last.get("text", "")) + len(payload.get("text", "")) <= MAX_MERGED_CHARS
            ):
                merged[-1] = (
                    seq,
                    event_type,
                    {**last, "text": last.get("text", "") + payload.get("text", "")},
                )
                continue
        merged.append((seq, event_type, payload))
    return merged


def store_run_event(run: Run, event_type: str, payload: dict[str, Any]) -> int:
    """Store one event outside a worker (an action's ``run.queued``, or the
    ``run.cancelled`` of a run no worker holds) and relay it to live listeners once
    the transaction commits. Numbered under the run's row lock; call inside a
    transaction."""
    with connection.cursor() as cursor:
        cursor.execute(
            _STORE_NEXT_EVENT_SQL,
            {"run": run.pk, "tenant": run.tenant_id, "type": event_type[:40], "payload": _json_safe(payload)},
        )
        seq = cursor.fetchone()[0]
    relayed = {**payload, "run_id": run.pk}
    transaction.on_commit(partial(_relay_now, run.pk, int(seq), event_type, relayed))
    return int(seq)


def _relay_now(run_id: int, seq: int, event_type: str, payload: dict[str, Any]) -> None:
    # Fire and forget, in order, on the process's background loop: the event is
    # stored already, so a client that misses it gets it on resume.
    submit(current_relay().relay(run_id, seq, event_type, payload))


def events_after(run: Run, seq: int = 0, *, limit: int = 1000) -> list[RunEvent]:
    """The run's stored events with a sequence number above ``seq``, oldest first.
    ``run`` must come from an access check (``access_run``)."""
    return list(
        RunEvent._base_manager.filter(run_id=run.pk, tenant_id=run.tenant_id, seq__gt=seq).order_by("seq")[
            :limit
        ]
    )
