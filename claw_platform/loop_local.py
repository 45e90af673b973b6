"""One value per asyncio event loop.

Asyncio objects (futures, semaphores, tasks, connection pools) belong to the loop
that made them, and a process runs several loops: Daphne's, a worker's run loop, the
background loop, a test's. Whatever batches or limits work per loop keeps one value
per loop here; the values of loops that have closed are dropped as new ones come.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class LoopLocal(Generic[T]):
    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._values: dict[asyncio.AbstractEventLoop, T] = {}

    def get(self) -> T:
        """The running loop's value, made on first use."""
        loop = asyncio.get_running_loop()
        value = self._values.get(loop)
        if value is None:
            for closed in [other for other in self._values if other.is_closed()]:
                del self._values[closed]
            value = self._values[loop] = self._factory()
        return value
