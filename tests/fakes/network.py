"""Block real network access in tests (STYLE rule 13).

An autouse fixture: any socket ``connect`` to an address that is not loopback raises
:class:`NetworkBlocked`, and so does resolving a host name other than ``localhost``.
Unix sockets (PostgreSQL's local socket) are allowed. Extra hosts a test run truly
needs (say a CI database service) go in ``CLAW_TEST_ALLOWED_HOSTS`` (comma-separated).
Registered from ``tests/conftest.py``::

    pytest_plugins = ["tests.fakes.fixtures", "tests.fakes.network"]
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


class NetworkBlocked(RuntimeError):
    """A test tried to reach the real network."""


def _allowed_hosts() -> set[str]:
    extra = os.environ.get("CLAW_TEST_ALLOWED_HOSTS", "")
    return _LOCAL_NAMES | {h.strip().lower() for h in extra.split(",") if h.strip()}


def is_loopback_host(host: Any) -> bool:
    """True for loopback addresses and names, and hosts explicitly allowed."""
    if host is None:
        return True  # getaddrinfo(None, port) means the local host
    if isinstance(host, bytes):
        host = host.decode()
    name = str(host).strip("[]").lower()
    if name in _allowed_hosts():
        return True
    try:
        return ipaddress.ip_address(name.split("%")[0]).is_loopback
    except ValueError:
        return False


def _check_address(family: int, address: Any) -> None:
    if family not in (socket.AF_INET, socket.AF_INET6):
        return  # AF_UNIX and friends never leave the machine
    host = address[0] if isinstance(address, tuple) else address
    if not is_loopback_host(host):
        raise NetworkBlocked(f"network access blocked in tests: connect to {address!r}")


@pytest.fixture(autouse=True)
def block_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make non-loopback connects and name lookups raise for the test's duration."""
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> None:
        _check_address(self.family, address)
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        _check_address(self.family, address)
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_loopback_host(host):
            raise NetworkBlocked(f"network access blocked in tests: resolve {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return
