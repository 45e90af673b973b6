"""Waiting for a run to settle without a listener per call (A2 ``wait``, A3).

The worker NOTIFYs ``claw_run_settled`` with the run's id in the transaction that
finishes the run or pauses it for approval (``agents.actions.runs.notify_run_settled``),
followed by the committed rows when they fit (``agents.actions.run_snapshot``).
The process's listener (:mod:`claw_platform.api.listener`) wakes the calls waiting
for that run, whatever their event loop; a waiter's future gives the snapshot, or
None. A waiter registers before it reads the run's row, so a settle that commits in
between still wakes it; a lost connection wakes every waiter (they read
their row again) and the listener reconnects. Waiters also re-read the row every few
seconds, so a missed notification costs a poll, never a hung call.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict

from agents.actions.runs import RUN_SETTLED_CHANNEL
from claw_platform.api.listener import READY_WAIT_SECONDS, process_listener

__all__ = ["RUN_SETTLED_CHANNEL", "SettledWaiters", "settled_listener", "settled_waiters"]

RECENT_SETTLES = 2048  # settles remembered for waiters that register just after theirs


class SettledWaiters:
    """The calls waiting for runs to settle, woken by :mod:`claw_platform.api.listener`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[int, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[str | None]]]] = {}
        # The latest settles, so a waiter that registers just after its run's
        # notification still gets it; and since when the listener has heard them all.
        self._recent: OrderedDict[int, str | None] = OrderedDict()
        self._connected_at: float | None = None

    def listening_since(self, moment: float) -> bool:
        """True when every settle notification since ``moment`` (monotonic) reached
        this process: the listener has been connected without a break since then."""
        with self._lock:
            return self._connected_at is not None and self._connected_at <= moment

    async def ready(self) -> None:
        """Start the listener and wait (briefly) until its LISTEN is in place: before
        it, a settle is only seen by the waiters' poll."""
        listener = process_listener()
        if not listener.ready.is_set():
            await asyncio.to_thread(listener.ready.wait, READY_WAIT_SECONDS)

    def register(self, run_id: int, *, recent: bool = False) -> asyncio.Future[str | None]:
        """A future for the run's next settle; with ``recent``, its latest settle if it
        came already (for a run queued while the listener listened, whose first
        settle may beat the waiter)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str | None] = loop.create_future()
        with self._lock:
            if recent and run_id in self._recent:
                future.set_result(self._recent[run_id])
            else:
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
                self._recent[run_id] = snapshot
                while len(self._recent) > RECENT_SETTLES:
                    self._recent.popitem(last=False)
        for loop, future in woken:
            if not loop.is_closed():
                loop.call_soon_threadsafe(_resolve, future, snapshot)

    # ChannelHandler: whatever settled while nobody listened is read from the rows.
    def connected(self) -> None:
        with self._lock:
            self._connected_at = time.monotonic()
        self._wake(None)

    def disconnected(self) -> None:
        with self._lock:
            self._connected_at = None
        self._wake(None)

    def notified(self, payload: str) -> None:
        run_id, _, snapshot = payload.partition(":")
        if run_id.isdigit():
            self._wake(int(run_id), snapshot or None)


def _resolve(future: asyncio.Future[str | None], snapshot: str | None) -> None:
    if not future.done():
        future.set_result(snapshot)


settled_waiters = SettledWaiters()


def settled_listener() -> SettledWaiters:
    """This process's waiters, with the listener that wakes them started."""
    process_listener()
    return settled_waiters
