"""Instant dispatch: a worker claims a run the moment it is committed.

``enqueue_runs`` NOTIFYs ``claw_runs`` with the runs' ids, next to the django-q2 task,
which stays the durable path (whichever django-q2 worker picks it up claims the run
if nobody did). Without this a run would wait for the task queue's next poll.

The dispatcher has a thread, an event loop and two connections of its own (one
listens, one claims), so a claim never waits behind the run loop: when two hundred
runs start at once, that loop is busy setting them up and streaming, and its
database threads are queued with their reads; a claim made there waited for all of
it. Claimed runs are handed to the supervisor's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from django.conf import settings

from agents.actions.runs import RUN_NOTIFY_CHANNEL
from agents.runtime.claims import CLAIMABLE_SQL, Claim, claim_params, claim_runs_on
from claw_platform.db import listen_connection_params
from claw_platform.prepared import prepare_threshold

logger = logging.getLogger("claw.runs.dispatch")


class RunDispatcher:
    """Listens for new runs and claims them for ``owner``; ``room()`` says how many
    more runs this worker takes, ``start(claim)`` hands one over (from this thread)."""

    def __init__(self, owner: str, room: Callable[[], int], start: Callable[[Claim], None]) -> None:
        self.owner = owner
        self.room = room
        self.start = start
        self.loop = asyncio.new_event_loop()
        self._wanted: set[int] = set()
        self._claimer: asyncio.Task[None] | None = None
        self._claim_conn: psycopg.AsyncConnection[Any] | None = None
        self._main: asyncio.Future[None] | None = None
        self.thread = threading.Thread(target=self._run, name="claw-dispatch", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._main = asyncio.ensure_future(self._listen(), loop=self.loop)
        with contextlib.suppress(asyncio.CancelledError):
            self.loop.run_until_complete(self._main)
        self.loop.run_until_complete(self._close())
        self.loop.close()

    def stop(self) -> None:
        if self._main is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._main.cancel)
        self.thread.join(timeout=10)

    async def _listen(self) -> None:
        params = listen_connection_params()
        failures = 0
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(**params, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {RUN_NOTIFY_CHANNEL}")
                    await self._claim_connection()  # the first run does not wait to open it
                    failures = 0
                    # Anything queued while nobody listened (start-up, a lost connection).
                    cursor = await conn.execute(CLAIMABLE_SQL, {"limit": settings.CLAW_RUNS_PER_WORKER})
                    self._want([row[0] for row in await cursor.fetchall()])
                    async for note in conn.notifies():
                        # One run id, or several comma separated (a batch of messages).
                        with contextlib.suppress(ValueError):
                            self._want([int(run_id) for run_id in note.payload.split(",")])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay = min(0.2 * 2**failures, 5.0)
                failures += 1
                logger.warning(
                    "run dispatch lost its database connection (%s); retrying in %.1fs", exc, delay
                )
                await asyncio.sleep(delay)

    def _want(self, run_ids: list[int]) -> None:
        self._wanted.update(run_ids)
        if self._wanted and (self._claimer is None or self._claimer.done()):
            self._claimer = self.loop.create_task(self._claim_wanted())

    async def _claim_wanted(self) -> None:
        # Notifications that arrive while a claim is in flight join the next batch.
        while self._wanted:
            room = self.room()
            if room <= 0:
                # Full: they stay queued for the task queue, a freed slot or the sweeper.
                self._wanted.clear()
                return
            batch = sorted(self._wanted)[: room * 2]
            self._wanted.difference_update(batch)
            try:
                claims = await self._claim(batch, room)
            except Exception:
                logger.exception("claiming runs %s failed; the task queue will deliver them", batch)
                continue
            for claim in claims:
                self.start(claim)

    async def _claim_connection(self) -> psycopg.AsyncConnection[Any]:
        if self._claim_conn is None or self._claim_conn.closed:
            self._claim_conn = await psycopg.AsyncConnection.connect(
                **{**listen_connection_params(), "prepare_threshold": prepare_threshold()}, autocommit=True
            )
        return self._claim_conn

    async def _claim(self, run_ids: list[int], limit: int) -> list[Claim]:
        conn = await self._claim_connection()
        try:
            return await claim_runs_on(conn, run_ids, claim_params(self.owner), limit=limit)
        except psycopg.OperationalError:
            # A database restart broke it: the next batch opens a new one.
            await conn.close()
            raise

    async def _close(self) -> None:
        if self._claim_conn is not None:
            await self._claim_conn.close()
