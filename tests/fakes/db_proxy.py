"""A TCP front for the test database that can go down and come back: an outage drill
for processes started with its URL, while the server (and the rest of the suite's
connections) stays up.

``down()`` cuts every connection through it and refuses new ones, as a stopped
server does; ``up()`` accepts again on the same port. PostgreSQL sees the proxy's
own connections, over the server's socket as the suite's are.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from typing import Any
from urllib.parse import quote


class DatabaseProxy:
    def __init__(self, settings_dict: dict[str, Any]) -> None:
        host = settings_dict["HOST"] or "127.0.0.1"
        port = int(settings_dict["PORT"] or 5432)
        if host.startswith("/"):
            self._target: Any = f"{host}/.s.PGSQL.{port}"
            self._family = socket.AF_UNIX
        else:
            self._target = (host, port)
            self._family = socket.AF_INET
        self._settings = settings_dict
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._listener: socket.socket | None = None
        self._stopped = threading.Event()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        s = self._settings
        user = quote(s.get("USER") or "", safe="")
        password = quote(s.get("PASSWORD") or "", safe="")
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{s['NAME']}"

    def start(self) -> DatabaseProxy:
        self.up()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self.down()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def up(self) -> None:
        with self._lock:
            if self._listener is None:
                listener = socket.socket()
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                listener.bind(("127.0.0.1", self.port))
                listener.listen(128)
                self._listener = listener

    def down(self) -> None:
        """Refuse new connections and cut the open ones."""
        with self._lock:
            listener, self._listener = self._listener, None
            pairs, self._pairs = self._pairs, []
        if listener is not None:
            listener.close()
        for client, server in pairs:
            for sock in (client, server):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            listener = self._listener
            if listener is None:
                self._stopped.wait(0.05)
                continue
            try:
                ready, _, _ = select.select([listener], [], [], 0.05)
                if not ready:
                    continue
                client, _ = listener.accept()
            except (OSError, ValueError):
                continue  # closed by down()
            try:
                server = socket.socket(self._family)
                server.connect(self._target)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is None:  # went down meanwhile
                    client.close()
                    server.close()
                    continue
                self._pairs.append((client, server))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        peers = {client: server, server: client}
        try:
            while True:
                ready, _, _ = select.select(list(peers), [], [], 1.0)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    peers[sock].sendall(data)
        except (OSError, ValueError):
            return
        finally:
            for sock in (client, server):
                with contextlib.suppress(OSError):
                    sock.close()
            with self._lock, contextlib.suppress(ValueError):
                self._pairs.remove((client, server))
