"""Twisted TCP writes sent at once (claw_platform.immediate_writes), on a real socket
pair: a frame goes out without the reactor, a write the socket cannot take is
buffered and the rest keeps its order, and a closing connection keeps Twisted's path."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from twisted.internet import tcp
from twisted.internet.protocol import Protocol

from claw_platform.immediate_writes import _buffered_write, _write_now


class RecordingReactor:
    """The two calls a TCP connection makes on its reactor when it buffers."""

    def __init__(self) -> None:
        self.writers: list[object] = []

    def addWriter(self, writer: object) -> None:
        self.writers.append(writer)

    def removeWriter(self, writer: object) -> None:
        self.writers.remove(writer)


@pytest.fixture
def pair() -> Iterator[tuple[tcp.Connection, socket.socket, RecordingReactor]]:
    ours, peer = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16_384)
    reactor = RecordingReactor()
    connection = tcp.Connection(ours, Protocol(), reactor=reactor)  # type: ignore[arg-type]
    connection.connected = True
    yield connection, peer, reactor
    ours.close()
    peer.close()


def received(peer: socket.socket, size: int) -> bytes:
    peer.settimeout(5)
    data = b""
    while len(data) < size:
        data += peer.recv(size - len(data))
    return data


def test_a_frame_is_sent_at_once_without_the_reactor(pair: tuple) -> None:
    connection, peer, reactor = pair
    _write_now(connection, b"frame one")
    assert received(peer, 9) == b"frame one"
    assert reactor.writers == []
    assert not connection.dataBuffer
    assert not connection._tempDataBuffer


def test_what_the_socket_cannot_take_is_buffered_and_order_is_kept(pair: tuple) -> None:
    connection, peer, reactor = pair
    big = bytes(range(256)) * 4096  # 1 MB: more than the socket buffers hold
    _write_now(connection, big)
    assert reactor.writers == [connection]  # the rest waits for the reactor
    _write_now(connection, b"after")  # queued behind the rest, not sent ahead of it
    expected = big + b"after"
    data = b""
    peer.settimeout(5)
    while len(data) < len(expected):
        data += peer.recv(65_536)
        if connection in reactor.writers:
            connection.doWrite()  # what the reactor does when the socket is writable
    assert data == expected
    assert reactor.writers == []


def test_a_closing_connection_keeps_twisted_s_path(pair: tuple) -> None:
    connection, _peer, reactor = pair
    connection.disconnecting = True
    _write_now(connection, b"late")
    assert reactor.writers == [connection]
    assert connection._tempDataBuffer == [b"late"]


def test_the_web_entry_point_installs_it_lazy_log_arguments_and_freezes_its_heap() -> None:
    code = (
        "import gc, claw_platform.asgi\n"
        "from autobahn import util\n"
        "from autobahn.websocket import protocol\n"
        "from twisted.internet import tcp\n"
        "from claw_platform.immediate_writes import _write_now\n"
        "print(tcp.Connection.write is _write_now, protocol.hltype is not util.hltype,"
        " gc.get_freeze_count() > 1000)"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "claw_platform.settings"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["True", "True", "True"]
    assert _buffered_write is not _write_now  # Twisted's own write, kept for the slow path
