"""A sandboxed command's own network (T15, issue 21): outbound access only.

A networked sandbox never shares the host's network namespace (``--share-net``
would hand it every service on the host's loopback: the machine's PostgreSQL and
Redis, the product's ports). bwrap gives it a new, empty namespace as always, and
`slirp4netns <https://github.com/rootless-containers/slirp4netns>`_ (Debian
package ``slirp4netns``, the user-mode network of rootless Podman) attaches a tap
device to it whose traffic slirp4netns sends on from the host as ordinary sockets:

- ``--disable-host-loopback``: the gateway address (10.0.2.2), which slirp
  otherwise maps to the host's 127.0.0.1, goes nowhere; the sandbox's own
  127.0.0.1 is its own loopback, with nothing listening;
- the tap device's address and default route, and ``prohibit`` routes, set by
  ``ip`` (iproute2) run with ``nsenter`` in the sandbox's namespaces (not by
  ``slirp4netns --configure``, which also brings up ``lo`` and so races bwrap's own
  set-up of it): one for each of the host's own addresses -- a service bound to
  0.0.0.0 behind the host's firewall is not reachable through them either -- for the
  addresses of the product's own database and Redis when they are on other hosts,
  and for link-local addresses (cloud metadata services at 169.254.169.254);
- DNS through slirp's resolver (10.0.2.3), written into the sandbox's
  ``/etc/resolv.conf``.

The command is held by bwrap (``--block-fd``) until all of that is in place, and the
sandboxed command itself has no capabilities, so it cannot change a route.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import os
import shutil
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import psutil

RESOLV_CONF = b"nameserver 10.0.2.3\n"
TAP_DEVICE = "tap0"
MTU = 65520
# slirp4netns's defaults: the sandbox's address, its gateway (slirp) and resolver.
TAP_ADDRESS = "10.0.2.100/24"
GATEWAY = "10.0.2.2"
ALWAYS_BLOCKED = ("169.254.0.0/16",)  # link-local: cloud metadata services
_SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
SETUP_TIMEOUT = 10.0


class NetworkUnavailable(RuntimeError):
    """A networked sandbox was asked for where its own network cannot be made."""


@dataclass(frozen=True)
class NetworkTools:
    slirp4netns: str
    ip: str
    nsenter: str
    setpriv: str


@functools.cache
def network_tools() -> NetworkTools | None:
    """The programs a sandbox's network needs, or ``None`` when one is missing."""
    found = {
        name: shutil.which(name, path=f"{os.environ.get('PATH', '')}:{_SYSTEM_PATH}")
        for name in ("slirp4netns", "ip", "nsenter", "setpriv")
    }
    if not all(found.values()):
        return None
    return NetworkTools(**{name: str(path) for name, path in found.items()})


def missing_tools_text() -> str:
    names = {"slirp4netns": "slirp4netns", "ip": "iproute2", "nsenter": "util-linux", "setpriv": "util-linux"}
    missing = sorted(
        {
            package
            for name, package in names.items()
            if not shutil.which(name, path=f"{os.environ.get('PATH', '')}:{_SYSTEM_PATH}")
        }
    )
    return ", ".join(missing)


def blocked_networks() -> list[str]:
    """What a networked sandbox may not reach: the host's own addresses (read now:
    interfaces come and go), the product's services on other hosts, link-local."""
    blocked: dict[str, None] = {net: None for net in ALWAYS_BLOCKED}
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            # The sandbox's 127.0.0.1 is its own loopback, not the host's.
            if address.family == socket.AF_INET and not ipaddress.ip_address(address.address).is_loopback:
                blocked.setdefault(f"{address.address}/32", None)
    for address in product_service_addresses():
        blocked.setdefault(f"{address}/32", None)
    return list(blocked)


@functools.cache
def product_service_addresses() -> tuple[str, ...]:
    """IPv4 addresses of the database and Redis the product uses, when on other
    hosts (resolved once per process; the host's own are blocked anyway)."""
    from django.conf import settings

    hosts: set[str] = set()
    database_host = str(settings.DATABASES["default"].get("HOST") or "")
    if database_host and not database_host.startswith("/"):
        hosts.add(database_host)
    for name in ("CHANNEL_LAYER_URL", "CLAW_Q_BROKER_URL", "CLAW_CACHE_URL"):
        url = os.environ.get(name, "")
        if "://" in url:
            with contextlib.suppress(ValueError):
                if urlsplit(url).hostname:
                    hosts.add(str(urlsplit(url).hostname))
    addresses: set[str] = set()
    for host in hosts:
        try:
            infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            continue
        for info in infos:
            address = ipaddress.ip_address(info[4][0])
            if not address.is_loopback:
                addresses.add(str(address))
    return tuple(sorted(addresses))


@dataclass
class SandboxNetwork:
    """slirp4netns attached to one sandbox; :meth:`close` ends it."""

    process: asyncio.subprocess.Process
    exit_fd: int
    # Drains slirp4netns's stderr (a full pipe would stall it), keeping the end.
    stderr_tail: asyncio.Future[bytes]
    _closed: bool = field(default=False, repr=False)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            os.close(self.exit_fd)  # slirp4netns exits when this pipe closes
        try:
            await asyncio.wait_for(self.process.wait(), 5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(self.stderr_tail, 1)

    async def failure(self) -> str:
        """Why it failed, from its last line of stderr (ends it first)."""
        await self.close()
        tail = (
            self.stderr_tail.result() if self.stderr_tail.done() and not self.stderr_tail.cancelled() else b""
        )
        last = tail.decode(errors="replace").strip().splitlines()[-1:]
        return last[0] if last else "no reason given"


async def _tail(stream: asyncio.StreamReader | None, keep: int = 2_000) -> bytes:
    kept = b""
    if stream is None:
        return kept
    while chunk := await stream.read(4096):
        kept = (kept + chunk)[-keep:]
    return kept


async def read_pipe(fd: int, *, complete: Callable[[bytes], bool]) -> bytes:
    """Read the pipe ``fd`` until ``complete(data)`` or its end. Takes ``fd`` over:
    it is closed when this returns. Read on the event loop, not in a thread, so a
    cancelled read (a timeout) leaves no reader behind on a closed descriptor."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    pipe = os.fdopen(fd, "rb", buffering=0)
    try:
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    except BaseException:
        pipe.close()
        raise
    try:
        data = b""
        while not complete(data):
            chunk = await reader.read(4096)
            if not chunk:
                break
            data += chunk
        return data
    finally:
        transport.close()


async def attach_network(child_pid: int) -> SandboxNetwork:
    """Give the sandbox whose first process is ``child_pid`` its own outbound
    network (see the module docs). Raises :class:`NetworkUnavailable`; whatever
    goes wrong (a cancel too), no slirp4netns is left running."""
    tools = network_tools()
    if tools is None:
        raise NetworkUnavailable(f"missing: {missing_tools_text()}")
    if os.geteuid() == 0:
        # slirp4netns confines itself too (its own mount namespace, capabilities dropped).
        target = ["--enable-sandbox", str(child_pid)]
    else:
        # Another user enters the sandbox's user namespace first; --enable-sandbox
        # needs root there, which it is not.
        target = [
            f"--userns-path=/proc/{child_pid}/ns/user",
            "--netns-type=path",
            f"/proc/{child_pid}/ns/net",
        ]
    ready_read, ready_write = os.pipe()
    exit_read, exit_write = os.pipe()
    try:
        process = await asyncio.create_subprocess_exec(
            tools.slirp4netns,
            f"--mtu={MTU}",
            "--disable-host-loopback",
            "--enable-seccomp",
            f"--ready-fd={ready_write}",
            f"--exit-fd={exit_read}",
            *target,
            TAP_DEVICE,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(ready_write, exit_read),
        )
    except BaseException as exc:
        for fd in (ready_read, exit_write):
            os.close(fd)
        if isinstance(exc, OSError):
            raise NetworkUnavailable(f"slirp4netns did not start ({exc.strerror})") from None
        raise
    finally:
        os.close(ready_write)
        os.close(exit_read)
    network = SandboxNetwork(process, exit_write, asyncio.ensure_future(_tail(process.stderr)))
    try:
        try:
            async with asyncio.timeout(SETUP_TIMEOUT):
                ready = await read_pipe(ready_read, complete=bool)
        except TimeoutError:
            ready = b""
        if ready != b"1":
            raise NetworkUnavailable(f"slirp4netns failed: {await network.failure()}")
        await _configure(tools, child_pid, blocked_networks())
    except BaseException:
        await network.close()
        raise
    return network


async def _configure(tools: NetworkTools, child_pid: int, blocked: list[str]) -> None:
    """The tap device's address and route, and ``prohibit`` routes for ``blocked``,
    in the sandbox's namespace, set from outside it. Root administers every
    namespace as it is; another user joins the sandbox's user namespace too, and
    keeps CAP_NET_ADMIN across the exec of ``ip`` as an ambient capability (its uid
    there is not 0, so the exec would drop it otherwise)."""
    argv = [tools.nsenter, f"--target={child_pid}"]
    if os.geteuid() != 0 and os.readlink(f"/proc/{child_pid}/ns/user") != os.readlink("/proc/self/ns/user"):
        argv += ["--user", "--preserve-credentials", "--net", tools.setpriv]
        argv += ["--inh-caps", "+net_admin", "--ambient-caps", "+net_admin"]
    else:
        argv += ["--net"]
    argv += [tools.ip, "-batch", "-"]
    lines = [
        f"link set {TAP_DEVICE} mtu {MTU} up",
        f"addr add {TAP_ADDRESS} dev {TAP_DEVICE}",
        f"route add default via {GATEWAY} dev {TAP_DEVICE}",
        *(f"route add prohibit {net}" for net in blocked),
    ]
    batch = "".join(line + "\n" for line in lines).encode()
    try:
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
    except OSError as exc:
        raise NetworkUnavailable(f"nsenter did not start ({exc.strerror})") from None
    try:
        _, errors = await asyncio.wait_for(process.communicate(batch), SETUP_TIMEOUT)
    except BaseException as exc:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        if isinstance(exc, TimeoutError):
            raise NetworkUnavailable("setting up its network timed out") from None
        raise
    if process.returncode != 0:
        last = errors.decode(errors="replace").strip().splitlines()[-1:] or ["no reason given"]
        raise NetworkUnavailable(f"setting up its network failed: {last[0]}")
