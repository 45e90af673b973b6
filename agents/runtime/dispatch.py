"""Instant dispatch: a worker claims a run the moment it is committed.

``enqueue_runs`` NOTIFYs ``claw_runs`` with the runs' ids, next to the django-q2 task,
which stays the durable path (whichever django-q2 worker picks it up claims the run
if nobody did). Without this a run would wait for the task queue's next poll.

The dispatcher has a thread, an event loop and two connections of its own (one
listens, one claims), so a claim never waits behind the run loop: when two hundred
runs start at once, that loop is busy setting them up and streaming, and its
database threads are queued with their reads; a claim made there waited for all of
it. Claimed runs are handed to the supervisor's loop.

With several workers, each claims its share of a burst (``agents.runtime.claims``:
in proportion to their free room), and the share it left to the others is its own
after ``SHARE_GRACE_SECONDS`` if they have not claimed it by then (a worker whose
connection is up but whose process is stuck, or full after all).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from django.conf import settings

from agents.actions.runs import RUN_NOTIFY_CHANNEL
from agents.runtime.claims import (
    CLAIMABLE_SQL,
    Claim,
    claim_params,
    claim_share_on,
    dispatcher_application_name,
)
from claw_platform.db import listen_connection_params
from claw_platform.outage import database_outage
from claw_platform.prepared import prepare_threshold
from claw_platform.tenancy.rls import system_connection_params

logger = logging.getLogger("claw.runs.dispatch")

# How long the runs a claim left to the other workers wait for them before this
# worker claims them too.
SHARE_GRACE_SECONDS = 0.2


class RunDispatcher:
    """Listens for new runs and claims them for ``owner``; ``room()`` says how many
    more runs this worker takes (of ``capacity``, ``CLAW_RUNS_PER_WORKER`` unless
    given), ``start(claim)`` hands one over (from this thread)."""

    def __init__(
        self,
        owner: str,
        room: Callable[[], int],
        start: Callable[[Claim], None],
        capacity: int | None = None,
    ) -> None:
        self.owner = owner
        self.room = room
        self.start = start
        self.capacity = settings.CLAW_RUNS_PER_WORKER if capacity is None else capacity
        self.loop = asyncio.new_event_loop()
        self._wanted: set[int] = set()  # to claim this worker's share of
        self._overdue: set[int] = set()  # left to the others, not claimed by them in time
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
        # Its name tells the other workers' claims that this one is there (and its size).
        # Its claims cross tenants by design: the connection carries the system bypass.
        params = {
            **system_connection_params(listen_connection_params()),
            "application_name": dispatcher_application_name(self.owner, self.capacity),
        }
        failures = 0
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(**params, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {RUN_NOTIFY_CHANNEL}")
                    await self._claim_connection()  # the first run does not wait to open it
                    failures = 0
                    database_outage.recovered()
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
                # The claim connection was most likely lost with it, unnoticed while
                # idle: the first claim after the outage would fail on it.
                claim_conn, self._claim_conn = self._claim_conn, None
                if claim_conn is not None:
                    with contextlib.suppress(Exception):
                        await claim_conn.close()
                await asyncio.sleep(delay)

    def _want(self, run_ids: list[int], *, share: bool = True) -> None:
        (self._wanted if share else self._overdue).update(run_ids)
        if (self._wanted or self._overdue) and (self._claimer is None or self._claimer.done()):
            self._claimer = self.loop.create_task(self._claim_wanted())

    async def _claim_wanted(self) -> None:
        # Notifications that arrive while a claim is in flight join the next batch.
        while self._wanted or self._overdue:
            room = self.room()
            if room <= 0:
                # Full: they stay queued for the task queue, a freed slot or the sweeper.
                self._wanted.clear()
                self._overdue.clear()
                return
            share = not self._overdue
            pending = self._wanted if share else self._overdue
            batch = sorted(pending)[: room * 2]
            pending.difference_update(batch)
            try:
                claims, left = await self._claim(batch, room, share=share)
            except Exception:
                logger.exception("claiming runs %s failed; the task queue will deliver them", batch)
                continue
            for claim in claims:
                self.start(claim)
            if share and left and len(claims) < room:
                claimed = {claim.run_id for claim in claims}
                rest = [run_id for run_id in batch if run_id not in claimed]
                self.loop.call_later(SHARE_GRACE_SECONDS, functools.partial(self._want, rest, share=False))

    async def _claim_connection(self) -> psycopg.AsyncConnection[Any]:
        if self._claim_conn is None or self._claim_conn.closed:
            # Claims of any tenant's runs: a system connection (the bypass set at connect).
            self._claim_conn = await psycopg.AsyncConnection.connect(
                **{
                    **system_connection_params(listen_connection_params()),
                    "prepare_threshold": prepare_threshold(),
                },
                autocommit=True,
            )
        return self._claim_conn

    async def _claim(self, run_ids: list[int], limit: int, *, share: bool) -> tuple[list[Claim], int]:
        conn = await self._claim_connection()
        try:
            return await claim_share_on(conn, run_ids, claim_params(self.owner, share=share), limit=limit)
        except psycopg.OperationalError:
            # A database restart broke it: the next batch opens a new one.
            await conn.close()
            raise

    async def _close(self) -> None:
        if self._claim_conn is not None:
            await self._claim_conn.close()
