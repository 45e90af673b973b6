"""A process-local cache of values that carry a version the database keeps.

Configuration a run reads every time (an agent, its tool policy, a tenant's
extensions) changes rarely; each change bumps a version number in the database.
The caller reads the current version (one small query) and gets the cached value
only when it was built for that version, and at most ``ttl`` seconds ago (a change
that bypassed the version bump is seen after that at the latest).
"""

from __future__ import annotations

import threading
import time
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class VersionedCache(Generic[K, V]):
    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._entries: dict[K, tuple[int, float, V]] = {}
        self._lock = threading.Lock()  # executor threads share it

    def get(self, key: K, version: int) -> V | None:
        """The value cached for ``key`` at ``version``, if still fresh."""
        with self._lock:
            hit = self._entries.get(key)
        if hit is not None and hit[0] == version and hit[1] > time.monotonic():
            return hit[2]
        return None

    def put(self, key: K, version: int, value: V) -> None:
        with self._lock:
            self._entries[key] = (version, time.monotonic() + self.ttl, value)

    def invalidate(self, key: K | None = None) -> None:
        """Drop one key (or every key)."""
        with self._lock:
            if key is None:
                self._entries.clear()
            else:
                self._entries.pop(key, None)
