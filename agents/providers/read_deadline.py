"""The longest a stream may go without a byte, bounded without a timer per chunk.

An HTTP client's read timeout re-arms a timer on every chunk received: aiohttp
cancels one ``TimerHandle`` and schedules another for each of them (two hundred
streams of forty tokens a second: 8,000 of each a second). A
:class:`ReadDeadline` keeps the time of the last chunk (a float store per chunk) and
one timer per stream that fires once per ``seconds``: when it finds the stream idle
that long while waiting for the network, it cancels the waiting task and the
``async with`` block raises ``httpx.ReadTimeout``, as the client would have.

The cancellation only ever lands while the stream's reader waits inside the block
(``waiting``): a consumer busy with an event it was handed is never interrupted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator
from types import TracebackType
from typing import TypeVar

import httpx

T = TypeVar("T")


class ReadDeadline:
    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.waiting = True  # from the request until its first chunk
        self.expired = False
        self._last = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[object] | None = None
        self._timer: asyncio.TimerHandle | None = None

    async def __aenter__(self) -> ReadDeadline:
        if self.seconds is not None:
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.current_task()
            self._last = self._loop.time()
            self._timer = self._loop.call_at(self._last + self.seconds, self._check)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._timer is not None:
            self._timer.cancel()
        # Our cancellation (and nobody else's): the stream timed out.
        task = self._task
        if self.expired and kind is asyncio.CancelledError and task is not None and task.uncancel() == 0:
            raise httpx.ReadTimeout(f"no data for {self.seconds:g} s") from exc

    async def watch(self, source: AsyncIterable[T]) -> AsyncIterator[T]:
        """``source``'s items; the wait for each counts against the deadline."""
        items = aiter(source)
        loop = asyncio.get_running_loop()
        while True:
            self.waiting = True
            try:
                item = await anext(items)
            except StopAsyncIteration:
                return
            finally:
                self.waiting = False
                self._last = loop.time()
            yield item

    def _check(self) -> None:
        assert self._loop is not None
        assert self.seconds is not None
        now = self._loop.time()
        due = self._last + self.seconds
        if self.waiting and now >= due and self._task is not None and not self._task.done():
            self.expired = True
            self._task.cancel()
            return
        # Busy with an item (not waiting) or heard from lately: look again later.
        self._timer = self._loop.call_at(max(due, now + self.seconds / 4), self._check)
