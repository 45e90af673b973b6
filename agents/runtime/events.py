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
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from psycopg.types.json import Jsonb

from agents.models import Run, RunEvent
from agents.runtime.relay_pump import EPHEMERAL_EVENTS, RelayedEvent, RunEventRelay, relay_events, relay_pump
from claw_platform.background_loop import submit
from claw_platform.db import db_async
from claw_platform.prepared import prepared_cursor

logger = logging.getLogger("claw.runs.events")

TERMINAL_EVENTS = frozenset({"run.completed", "run.failed", "run.cancelled"})
# Events that tell a listener the run has settled (finished, or paused for approval).
# They are stored in the transaction that writes the run's final status
# (``store_settling``, from the worker's settle) and relayed only after it (``drain``):
# whoever reacts to them (an API call in ``wait`` mode, an approval button) finds the
# run row, and its approval requests, already settled, and the event and the status
# commit together. A worker that lost the run's lease stores and relays neither.
SETTLING_EVENTS = TERMINAL_EVENTS | {"approval_needed"}
DRAIN_SECONDS = 10.0  # how long a finished run waits for its last events to be relayed


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

    Relaying never holds the run up: events go to the loop's relay pump
    (``agents.runtime.relay_pump``), which relays each delta at once when the layer
    is idle and merges the deltas that arrive while a publish is in flight, so the
    relay batches exactly as much as the layer's speed requires, instead of a fixed
    40 ms (``batches_deltas``: the engine hands every delta over).
    """

    batches_deltas = True

    def __init__(self, run_id: int, tenant_id: int, *, last_seq: int, relay: RunEventRelay | None = None):
        self.run_id = run_id
        self.tenant_id = tenant_id
        self.seq = last_seq
        self.relay = relay or current_relay()
        self._held: list[tuple[int, int, str, dict[str, Any]]] = []
        # Settling events not stored yet: (seq, type, payload).
        self._settling: list[tuple[int, str, dict[str, Any]]] = []

    def known_session(self, session_id: Any) -> None:
        """Tell the relay the run's session (it would read it from the database)."""
        remember = getattr(self.relay, "remember_run", None)
        if remember is not None:
            remember(self.run_id, session_id, self.tenant_id)

    async def emit(self, event_type: str, payload: dict[str, Any]) -> None:
        if event_type in SETTLING_EVENTS:
            self.seq += 1
            self._settling.append((self.seq, event_type, payload))
            self._held.append((self.run_id, self.seq, event_type, {**payload, "run_id": self.run_id}))
            return
        if event_type not in EPHEMERAL_EVENTS:
            self.seq += 1
            await db_async(self._store)(self.seq, event_type, payload)
        relay_pump(self.relay).push((self.run_id, self.seq, event_type, {**payload, "run_id": self.run_id}))

    def settling_seq(self) -> int:
        """The number of the last settling event not stored yet (0: none)."""
        return max((seq for seq, _type, _payload in self._settling), default=0)

    def store_settling(self) -> None:
        """Store the settling events emitted so far: call in the transaction that
        settles the run (sync: a database thread), then :meth:`settled` once it
        committed."""
        for seq, event_type, payload in self._settling:
            self._store(seq, event_type, payload)

    def settled(self) -> None:
        """The run's settle committed, with the settling events stored in it."""
        self._settling = []

    def drop_settling(self) -> None:
        """Forget the settling events emitted so far: the run settled otherwise (it
        was to pause for approval and was stopped meanwhile: its ``run.cancelled``
        took their place)."""
        dropped = {seq for seq, _type, _payload in self._settling}
        self._held = [event for event in self._held if event[1] not in dropped]
        self._settling = []

    async def drain(self) -> None:
        """Relay the settling events held back (those stored: a run whose settle did
        not commit has none), then wait until everything emitted so far has been
        relayed (end of a run, after its status is written)."""
        pump = relay_pump(self.relay)
        unstored = {seq for seq, _type, _payload in self._settling}
        for event in self._held:
            if event[1] not in unstored:
                pump.push(event)
        self._held = []
        try:
            await asyncio.wait_for(pump.flushed(), DRAIN_SECONDS)
        except TimeoutError:
            logger.warning("relaying the last events of run %s timed out", self.run_id)

    def _store(self, seq: int, event_type: str, payload: dict[str, Any]) -> None:
        with prepared_cursor() as cursor:
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


def store_run_event(run: Run, event_type: str, payload: dict[str, Any]) -> int:
    """Store one event outside a worker (an action's ``run.queued``, or the
    ``run.cancelled`` of a run no worker holds) and relay it to live listeners once
    the transaction commits. Numbered under the run's row lock; call inside a
    transaction."""
    with prepared_cursor() as cursor:
        cursor.execute(
            _STORE_NEXT_EVENT_SQL,
            {"run": run.pk, "tenant": run.tenant_id, "type": event_type[:40], "payload": _json_safe(payload)},
        )
        row = cursor.fetchone()
    if row is None:
        raise Run.DoesNotExist(f"No run {run.pk}.")
    seq = row[0]
    relayed = {**payload, "run_id": run.pk}
    remember = getattr(current_relay(), "remember_run", None)
    if remember is not None:
        remember(run.pk, run.session_id, run.tenant_id)
    transaction.on_commit(partial(_relay_now, run.pk, int(seq), event_type, relayed))
    return int(seq)


def _relay_now(run_id: int, seq: int, event_type: str, payload: dict[str, Any]) -> None:
    # Fire and forget, in order, on the process's background loop: the event is
    # stored already, so a client that misses it gets it on resume.
    submit(current_relay().relay(run_id, seq, event_type, payload))


def relay_stored_events(events: list[tuple[Run, int, str, dict[str, Any]]]) -> None:
    """Relay events the caller stored itself (run, seq, type, payload) once the
    transaction commits, all in one call to the relay."""
    relay = current_relay()
    remember = getattr(relay, "remember_run", None)
    relayed: list[RelayedEvent] = []
    for run, seq, event_type, payload in events:
        if remember is not None:
            remember(run.pk, run.session_id, run.tenant_id)
        relayed.append((run.pk, seq, event_type, {**payload, "run_id": run.pk}))
    if relayed:
        transaction.on_commit(lambda: submit(relay_events(current_relay(), relayed)))


def events_after(run: Run, seq: int = 0, *, limit: int = 1000) -> list[RunEvent]:
    """The run's stored events with a sequence number above ``seq``, oldest first.
    ``run`` must come from an access check (``access_run``)."""
    return list(
        RunEvent._base_manager.filter(run_id=run.pk, tenant_id=run.tenant_id, seq__gt=seq).order_by("seq")[
            :limit
        ]
    )
