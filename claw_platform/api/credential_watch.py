"""Open connections (sockets, event streams) by the credentials that opened them, so
that taking a right away reaches them (issue 21, defect 5).

Every change that may take a right away -- a key revoked, expired or deleted, its
tenant disabled, a membership removed or given another role, an account deactivated
or deleted -- is NOTIFYed on ``claw_api_keys`` by triggers (migrations ``api/0003``
and ``api/0005``), whoever makes it: an action, the admin, plain SQL. The process's
listener (:mod:`claw_platform.api.listener`) hands each notification to the key
cache first and then here: every connection that named the changed credential checks
its access again, on its own event loop, and closes when the access is gone or
changed. A connection opened while a notification was on its way checks once more
(:meth:`CredentialWatch.generation`); when the listener (re)connects, notifications
may have been missed, so every connection checks again.

Credential names are the notifications' payloads: a key's prefix, ``t:<tenant>``,
``m:<tenant>:<user>`` and ``u:<user>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime

logger = logging.getLogger("claw.api.credentials")

Check = Callable[[], Awaitable[None]]
# A key's check runs this long after its expiry, so that the key reads as expired.
EXPIRY_MARGIN_SECONDS = 0.05


def login_credentials(tenant_id: int, user_id: int) -> frozenset[str]:
    """What a connection opened with a member's login depends on."""
    return frozenset({f"t:{tenant_id}", f"m:{tenant_id}:{user_id}", f"u:{user_id}"})


def key_credentials(tenant_id: int, prefix: str, creator_id: int | None) -> frozenset[str]:
    """What a connection opened with an API key depends on: the key, its tenant, and
    the membership and account of the person it acts as."""
    names = {prefix, f"t:{tenant_id}"}
    if creator_id is not None:
        names |= {f"m:{tenant_id}:{creator_id}", f"u:{creator_id}"}
    return frozenset(names)


class Watch:
    """One connection's registration: runs ``check`` on ``loop`` when told, never two
    checks at once, and once more if told again while one ran."""

    def __init__(self, names: frozenset[str], check: Check, loop: asyncio.AbstractEventLoop) -> None:
        self.names = names
        self.check = check
        self.loop = loop
        self._running = False
        self._again = False
        self._task: asyncio.Future[None] | None = None
        self.timer: asyncio.TimerHandle | None = None

    def fire(self) -> None:
        """Thread-safe: schedule a check on the connection's loop."""
        with contextlib.suppress(RuntimeError):  # a closed loop: the connection is gone
            self.loop.call_soon_threadsafe(self._start)

    def _start(self) -> None:
        if self._running:
            self._again = True
            return
        self._running = True
        self._task = asyncio.ensure_future(self._run())  # kept: a bare task may be collected

    async def _run(self) -> None:
        try:
            while True:
                self._again = False
                try:
                    await self.check()
                except Exception:
                    logger.exception("re-checking a connection's access failed")
                if not self._again:
                    return
        finally:
            self._running = False


class CredentialWatch:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_name: dict[str, set[Watch]] = {}
        self._generation = 0

    def generation(self) -> int:
        """Read before a connection checks its access; pass it to :meth:`watch`."""
        with self._lock:
            return self._generation

    def watch(
        self, names: Iterable[str], check: Check, *, since: int, expires_at: datetime | None = None
    ) -> Watch:
        """Run ``check`` (on the running loop) whenever one of ``names`` changes, at
        once if any change was heard since ``generation()`` was ``since``, and when
        ``expires_at`` (a key's expiry, which nothing announces) passes."""
        from claw_platform.api.listener import process_listener

        process_listener()  # started on first use; until it listens, see connected()
        loop = asyncio.get_running_loop()
        entry = Watch(frozenset(names), check, loop)
        if expires_at is not None:
            delay = max(0.0, (expires_at - datetime.now(UTC)).total_seconds())
            entry.timer = loop.call_later(delay + EXPIRY_MARGIN_SECONDS, entry.fire)
        with self._lock:
            for name in entry.names:
                self._by_name.setdefault(name, set()).add(entry)
            missed = self._generation != since
        if missed:
            entry.fire()
        return entry

    def unwatch(self, entry: Watch | None) -> None:
        if entry is None:
            return
        if entry.timer is not None:
            entry.timer.cancel()
        with self._lock:
            for name in entry.names:
                watches = self._by_name.get(name)
                if watches is not None:
                    watches.discard(entry)
                    if not watches:
                        del self._by_name[name]

    def _fire(self, names: Iterable[str] | None) -> None:
        with self._lock:
            self._generation += 1
            if names is None:
                targets = {w for watches in self._by_name.values() for w in watches}
            else:
                targets = {w for name in names for w in self._by_name.get(name, ())}
        for entry in targets:
            entry.fire()

    # ChannelHandler (claw_platform.api.listener)
    def connected(self) -> None:
        self._fire(None)  # whatever changed while nobody listened

    def disconnected(self) -> None:
        pass

    def notified(self, payload: str) -> None:
        self._fire(None if payload == "*" else [payload])


credential_watch = CredentialWatch()
