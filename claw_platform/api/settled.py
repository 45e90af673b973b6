"""Waiting for a run to settle without a listener per call (A2 ``wait``, A3).

The worker NOTIFYs ``claw_run_settled`` with the run's id in the transaction that
finishes the run or pauses it for approval (``agents.actions.runs.notify_run_settled``),
followed by the committed rows when they fit (``agents.actions.run_snapshot``).
One thread per process LISTENs and wakes the calls waiting for that run, whatever
their event loop; a waiter's future gives the snapshot, or None. A waiter registers before it reads the run's row, so a settle that
commits in between still wakes it; a lost connection wakes every waiter (they read
their row again) and the listener reconnects. Waiters also re-read the row every few
seconds, so a missed notification costs a poll, never a hung call.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import psycopg

from agents.actions.runs import RUN_SETTLED_CHANNEL
from claw_platform.db import listen_connection_params

logger = logging.getLogger("claw.api.settled")

READY_WAIT_SECONDS = 1.0


class SettledListener:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[int, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[str | None]]]] = {}
        self._ready = threading.Event()
        self._params = listen_connection_params()
        self._thread = threading.Thread(target=self._run, name="claw-run-settled", daemon=True)
        self._thread.start()

    async def ready(self) -> None:
        """Wait (briefly) until the LISTEN is in place: before it, a settle is only
        seen by the waiters' poll."""
        if not self._ready.is_set():
            await asyncio.to_thread(self._ready.wait, READY_WAIT_SECONDS)

    def register(self, run_id: int) -> asyncio.Future[str | None]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str | None] = loop.create_future()
        with self._lock:
            self._waiters.setdefault(run_id, []).append((loop, future))
        return future

    def unregister(self, run_id: int, future: asyncio.Future[str | None]) -> None:
        with self._lock:
            waiters = [w for w in self._waiters.get(run_id, []) if w[1] is not future]
            if waiters:
                self._waiters[run_id] = waiters
            else:
                self._waiters.pop(run_id, None)

    def _wake(self, run_id: int | None, snapshot: str | None = None) -> None:
        """Wake the waiters of ``run_id`` (every waiter when None) with ``snapshot``."""
        with self._lock:
            if run_id is None:
                woken = [w for ws in self._waiters.values() for w in ws]
                self._waiters.clear()
            else:
                woken = self._waiters.pop(run_id, [])
        for loop, future in woken:
            if not loop.is_closed():
                loop.call_soon_threadsafe(_resolve, future, snapshot)

    def _run(self) -> None:
        delay = 0.2
        while True:
            try:
                with psycopg.connect(**self._params, autocommit=True) as conn:
                    conn.execute(f"LISTEN {RUN_SETTLED_CHANNEL}")
                    self._ready.set()
                    delay = 0.2
                    self._wake(None)  # whatever settled while nobody listened
                    for note in conn.notifies():
                        run_id, _, snapshot = note.payload.partition(":")
                        if run_id.isdigit():
                            self._wake(int(run_id), snapshot or None)
            except Exception as exc:
                self._ready.clear()
                self._wake(None)
                # Said once per outage; the retries that follow are logged quietly.
                log = logger.warning if delay == 0.2 else logger.debug
                log("run-settled listener lost the database (%s); retrying in %.1fs", exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)


def _resolve(future: asyncio.Future[str | None], snapshot: str | None) -> None:
    if not future.done():
        future.set_result(snapshot)


_listener: SettledListener | None = None
_listener_lock = threading.Lock()


def settled_listener() -> SettledListener:
    """This process's listener, started on first use."""
    global _listener
    with _listener_lock:
        if _listener is None:
            _listener = SettledListener()
        return _listener
