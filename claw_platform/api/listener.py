"""One LISTEN connection per web process, in a thread of its own, for the API's
notifications: runs that settled (``settled``) and credentials that changed (API
keys, tenants, memberships, accounts: ``key_cache`` and ``credential_watch``). Each channel has a handler; a handler is told when the connection
is in place (whatever it missed meanwhile must be assumed) and when it is lost."""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

import psycopg

from claw_platform.db import listen_connection_params
from claw_platform.outage import database_outage

logger = logging.getLogger("claw.api.listener")

READY_WAIT_SECONDS = 1.0


class ChannelHandler(Protocol):
    def connected(self) -> None:
        """LISTEN is in place: from now on every notification arrives."""

    def disconnected(self) -> None:
        """The connection was lost: notifications may be missed until ``connected``."""

    def notified(self, payload: str) -> None: ...


class ProcessListener:
    def __init__(self, handlers: dict[str, ChannelHandler]) -> None:
        self.handlers = handlers
        self.ready = threading.Event()
        self._params = listen_connection_params()
        self._thread = threading.Thread(target=self._run, name="claw-api-listener", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        delay = 0.2
        while True:
            try:
                with psycopg.connect(**self._params, autocommit=True) as conn:
                    for channel in self.handlers:
                        conn.execute(f"LISTEN {channel}")
                    self.ready.set()
                    database_outage.recovered()
                    delay = 0.2
                    for handler in self.handlers.values():
                        handler.connected()
                    for note in conn.notifies():
                        receiver = self.handlers.get(note.channel)
                        if receiver is not None:
                            receiver.notified(note.payload)
            except Exception as exc:
                self.ready.clear()
                for handler in self.handlers.values():
                    handler.disconnected()
                # Said once per outage; the retries that follow are logged quietly.
                log = logger.warning if delay == 0.2 else logger.debug
                log("the API's notification listener lost the database (%s); retrying in %.1fs", exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)


class InOrder:
    """Several handlers of one channel, told in order (the key cache forgets a key
    before the connections it opened check their access again)."""

    def __init__(self, *handlers: ChannelHandler) -> None:
        self.handlers = handlers

    def connected(self) -> None:
        for handler in self.handlers:
            handler.connected()

    def disconnected(self) -> None:
        for handler in self.handlers:
            handler.disconnected()

    def notified(self, payload: str) -> None:
        for handler in self.handlers:
            handler.notified(payload)


_listener: ProcessListener | None = None
_listener_lock = threading.Lock()


def process_listener() -> ProcessListener:
    """This process's listener, started on first use."""
    global _listener
    with _listener_lock:
        if _listener is None:
            from claw_platform.api.credential_watch import credential_watch
            from claw_platform.api.key_cache import API_KEYS_CHANNEL, key_cache
            from claw_platform.api.settled import RUN_SETTLED_CHANNEL, settled_waiters

            _listener = ProcessListener(
                {RUN_SETTLED_CHANNEL: settled_waiters, API_KEYS_CHANNEL: InOrder(key_cache, credential_watch)}
            )
        return _listener
