"""Partial-text checkpoints of the runs on one event loop, written together.

While a reply streams, its text so far is checkpointed on the turn (about once a
second per run, ``DeltaCoalescer``) so that a client that reconnects sees the message
so far. Written one by one, two hundred streaming runs make two hundred ORM updates
a second, each a hop to a database thread that competes with the run loop for the
GIL. Here every run's latest text waits up to ``DELAY`` seconds and all of them go
out in one statement.

Order with the turn's other writes: a step that stores the reply's messages clears
the partial text, so a checkpoint must never land after it. ``forget`` drops the
turn's waiting text and waits for a write in flight that carries it; the store calls
it before every such write. A checkpoint that comes late for any other reason is
ignored by the database once the turn is no longer running.
"""

from __future__ import annotations

import asyncio
import logging

from claw_platform.db import db_async
from claw_platform.loop_local import LoopLocal
from claw_platform.prepared import prepared_cursor

logger = logging.getLogger("claw.runs.partials")

DELAY = 0.25  # how long a checkpoint waits for others to share its statement

# Prepared, with binary parameters: quoted as text, 200 turns' texts (a few KB each)
# cost the run loop's process milliseconds every DELAY.
_WRITE_SQL = """
UPDATE agents_turn t SET partial_text = v.text
FROM unnest(%b::bigint[], %b::text[]) AS v(id, text)
WHERE t.id = v.id AND t.state = 'running'
"""


class PartialTextWriter:
    """One per event loop (:func:`partial_writer`)."""

    def __init__(self) -> None:
        self.pending: dict[int, str] = {}
        # The turns of the statement in flight, and a future that ends with it.
        self._writing: tuple[set[int], asyncio.Future[None]] | None = None
        self._writer: asyncio.Task[None] | None = None

    def put(self, turn_id: int, text: str) -> None:
        """Checkpoint ``text`` as the turn's partial text soon (the newest text wins)."""
        self.pending[turn_id] = text
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._write())

    async def forget(self, turn_id: int) -> None:
        """Drop the turn's waiting checkpoint; return once no write carrying it is in
        flight (call before a write that must come after every checkpoint)."""
        self.pending.pop(turn_id, None)
        if self._writing is not None and turn_id in self._writing[0]:
            await asyncio.shield(self._writing[1])

    async def _write(self) -> None:
        await asyncio.sleep(DELAY)
        while self.pending:
            batch, self.pending = self.pending, {}
            done = asyncio.get_running_loop().create_future()
            self._writing = (set(batch), done)
            try:
                await db_async(_write_batch)(list(batch), list(batch.values()))
            except Exception:
                # Best effort: the reply keeps streaming through a database blip; a
                # missed checkpoint only makes a reconnecting client's snapshot older.
                logger.warning("partial-text checkpoint of %d turns failed", len(batch), exc_info=True)
            finally:
                self._writing = None
                done.set_result(None)


def _write_batch(turn_ids: list[int], texts: list[str]) -> None:
    with prepared_cursor() as cursor:
        cursor.execute(_WRITE_SQL, [turn_ids, texts])


_writers = LoopLocal(PartialTextWriter)


def partial_writer() -> PartialTextWriter:
    """The running event loop's writer."""
    return _writers.get()
