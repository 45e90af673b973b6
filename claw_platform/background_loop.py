"""One asyncio loop per process, in a daemon thread, for async work started from sync code.

``async_to_sync`` from plain sync code (a management command, an admin action under
WSGI, a test) runs each call in a brand-new event loop; async clients that keep a
connection pool per loop (the channel layer) would open a pool per call and leak it.
Work handed to :func:`submit` runs instead on this process's one background loop,
in submission order, so fire-and-forget publishes from sync code keep their order
and share one pool.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import threading
from collections.abc import Coroutine
from typing import Any

logger = logging.getLogger("claw.background_loop")


class BackgroundLoop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._queue: asyncio.Queue[
            tuple[Coroutine[Any, Any, Any], contextvars.Context, concurrent.futures.Future[Any]]
        ]
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self._queue = asyncio.Queue()
            self.loop.create_task(self._drain())
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, name="claw-background-loop", daemon=True)
        self.thread.start()
        ready.wait()

    async def _drain(self) -> None:
        while True:
            coro, context, future = await self._queue.get()
            try:
                # In the submitter's context (its tenant, or the system bypass, and its
                # log ids): a delivery started inside tenant_context(A) reads A's rows.
                result = await self.loop.create_task(coro, context=context)
            except Exception as exc:
                logger.exception("background work failed")
                future.set_exception(exc)
            else:
                future.set_result(result)

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """Run ``coro`` after everything submitted before it; returns a future the
        caller may wait on (or ignore)."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        context = contextvars.copy_context()
        self.loop.call_soon_threadsafe(self._queue.put_nowait, (coro, context, future))
        return future


_instance: BackgroundLoop | None = None
_lock = threading.Lock()


def background_loop() -> BackgroundLoop:
    global _instance
    with _lock:
        if _instance is None:
            _instance = BackgroundLoop()
        return _instance


def submit(coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
    return background_loop().submit(coro)
